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


def _first_at(nodes, ranks):
    """For each edge, whether its rank is the best (lowest) among the edges sharing its node."""
    best = np.full(int(nodes.max(initial=-1)) + 1, np.iinfo(np.int64).max)
    np.minimum.at(best, nodes, ranks)
    return best[nodes] == ranks


def select_max_in_rounds(forward, backward):
    """`select_max` by rounds of edges first at both their sentences; returns `(scores, xs, ys)`, rounds."""
    scores, xs, ys = (np.concatenate(parts) for parts in zip(forward, backward))
    order = best_first(scores, xs, ys)
    ranks = np.empty(len(order), np.int64)
    ranks[order] = np.arange(len(order))
    active = np.ones(len(ranks), bool)
    kept = np.zeros(len(ranks), bool)
    rounds = 0
    while active.any():
        rounds += 1
        live = np.flatnonzero(active)
        first = live[_first_at(xs[live], ranks[live]) & _first_at(ys[live], ranks[live])]
        kept[first] = True
        taken_x, taken_y = np.zeros(xs.max() + 1, bool), np.zeros(ys.max() + 1, bool)
        taken_x[xs[first]] = taken_y[ys[first]] = True
        active &= ~(taken_x[xs] | taken_y[ys])
    chosen = np.flatnonzero(kept)
    chosen = chosen[np.argsort(ranks[chosen])]
    return (scores[chosen], xs[chosen], ys[chosen]), rounds


def intersect(forward, backward):
    """Forward candidates whose pair the backward search found too, best first, with the forward score."""
    scores, xs, ys = forward
    found_back = set(zip(backward[1].tolist(), backward[2].tolist()))
    keep = np.fromiter(((x, y) in found_back for x, y in zip(xs.tolist(), ys.tolist())), bool, len(xs))
    scores, xs, ys = scores[keep], xs[keep], ys[keep]
    order = best_first(scores, xs, ys)
    return scores[order], xs[order], ys[order]
