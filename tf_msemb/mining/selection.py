"""Selecting mined pairs from both directions' candidates, on arrays: `(scores, x rows, y rows)`.

`select_max` is `evaluation.mining.select(..., "max")` (best first, each
sentence used once) as one greedy pass. `select_max_in_rounds` reaches the
same pairs by rounds that only ever look at one sentence's candidates at a
time, which is what lets a pipeline select by key, on many workers: an edge
that ranks first among the candidates of both its sentences is one greedy
keeps (no better edge can take either sentence), so each round keeps every
such edge, drops the edges that touch a kept sentence, and goes on with the
rest. The best remaining edge always qualifies, so every round keeps at
least one.
"""

import numpy as np


def best_first(scores, xs, ys):
    """An order of candidates by score, then x, then y, all descending (`mining.select`'s order)."""
    return np.lexsort((-ys, -xs, -scores))


def select_max(forward, backward):
    """Both directions' candidates, best first, each sentence used once: `mining.select(..., "max")`."""
    scores, xs, ys = (np.concatenate(parts) for parts in zip(forward, backward))
    order = best_first(scores, xs, ys)
    used_x, used_y = bytearray(int(xs.max(initial=-1)) + 1), bytearray(int(ys.max(initial=-1)) + 1)
    chosen = []
    for position, x, y in zip(order.tolist(), xs[order].tolist(), ys[order].tolist()):
        if not used_x[x] and not used_y[y]:
            used_x[x] = used_y[y] = 1
            chosen.append(position)
    chosen = np.asarray(chosen, np.int64)
    return scores[chosen], xs[chosen], ys[chosen]


def first_at(nodes, scores, xs, ys):
    """For each candidate `(scores, xs, ys)`, whether it ranks first (`best_first`) among those sharing its node.

    `nodes` is `xs` or `ys`; ids may be any int64 (encode ids too). Given
    every candidate that touches a node, the answer is the same wherever it
    is computed: a pipeline computes it on the shard that owns the node.
    """
    order = best_first(scores, xs, ys)
    ranks = np.empty(len(order), np.int64)
    ranks[order] = np.arange(len(order))
    _, group = np.unique(nodes, return_inverse=True)
    best = np.full(group.max(initial=-1) + 1, np.iinfo(np.int64).max)
    np.minimum.at(best, group, ranks)
    return best[group] == ranks


def select_max_in_rounds(forward, backward):
    """`select_max` by rounds of edges first at both their sentences; returns `(scores, xs, ys)`, rounds."""
    scores, xs, ys = (np.concatenate(parts) for parts in zip(forward, backward))
    active = np.ones(len(scores), bool)
    kept = np.zeros(len(scores), bool)
    rounds = 0
    while active.any():
        rounds += 1
        live = np.flatnonzero(active)
        edges = scores[live], xs[live], ys[live]
        first = live[first_at(xs[live], *edges) & first_at(ys[live], *edges)]
        kept[first] = True
        active &= ~(np.isin(xs, xs[first]) | np.isin(ys, ys[first]))
    chosen = np.flatnonzero(kept)
    chosen = chosen[best_first(scores[chosen], xs[chosen], ys[chosen])]
    return (scores[chosen], xs[chosen], ys[chosen]), rounds


def intersect(forward, backward):
    """Forward candidates whose pair the backward search found too, best first, with the forward score."""
    scores, xs, ys = forward
    found_back = set(zip(backward[1].tolist(), backward[2].tolist()))
    keep = np.fromiter(((x, y) in found_back for x, y in zip(xs.tolist(), ys.tolist())), bool, len(xs))
    scores, xs, ys = scores[keep], xs[keep], ys[keep]
    order = best_first(scores, xs, ys)
    return scores[order], xs[order], ys[order]
