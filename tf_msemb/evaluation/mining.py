"""BUCC-style bitext mining with margin scores (Artetxe & Schwenk 2019; seed 004 Sec. 6).

For unit vectors `x` (source pool) and `y` (target pool), with `NN_k` the k
nearest neighbours by cosine in both directions (`search.knn_both`: exact
TensorFlow matmul + top-k from one pass over the score matrix, or a faiss
index each way):

    margin(x, y) = f(cos(x, y), sum_{z in NN_k(x)} cos(x, z) / 2k + sum_{z in NN_k(y)} cos(y, z) / 2k)

where `f(a, b)` is `a / b` (ratio), `a - b` (distance) or `a` (absolute).
Seed 004's second-stage scorers add the cosine back: `a / b + a` (Eq. 9,
`rescore`) and, with the one-directional margin `b = sum_{z in NN_k(x)} cos(x, z) / k`,
Eq. 10 (`rescore_one_sided`).

Each query's candidate is picked by one of two rules (`PICKS`):
`"nearest"`, seed 004's (Sec. 6): the cosine nearest neighbour, whose pair
the margin then rescores; `"best_of_k"`, Artetxe & Schwenk's (LASER's
mining code, which seed 001 Sec. 4.2 uses): the neighbour with the best
margin score among the k. By default each margin follows its paper
(`PAPER_PICKS`). Candidates come from the forward (x -> y), backward
(y -> x) searches, their intersection, or the max-score union with each
sentence used once.
"""

import dataclasses

import gin
import numpy as np

from tf_msemb.evaluation import search
from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.evaluator import file_tuples
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines

MARGINS = ("ratio", "distance", "absolute", "rescore", "rescore_one_sided")
SELECTIONS = ("forward", "backward", "intersect", "max")
PICKS = ("nearest", "best_of_k")
PAPER_PICKS = {"ratio": "best_of_k", "distance": "best_of_k", "absolute": "nearest", "rescore": "nearest",
               "rescore_one_sided": "nearest"}


def margin_scores(sims, mean_query, mean_candidates, margin):
    """Scores of `[n, k]` cosines given each side's mean k-NN cosine."""
    return _margin_from(sims, mean_query, (mean_query[:, None] + mean_candidates) / 2, margin)


def _margin_from(sims, mean_query, two_sided, margin):
    if margin == "ratio":
        return sims / two_sided
    if margin == "distance":
        return sims - two_sided
    if margin == "absolute":
        return sims
    if margin == "rescore":
        return sims / two_sided + sims
    if margin == "rescore_one_sided":
        return sims / mean_query[:, None] + sims
    raise ValueError(f"Unknown margin {margin!r}; choose from {MARGINS}.")


def margin_candidates(x, y, k=4, margin="ratio", index="exact", pick=None, **search_options):
    """Forward and backward candidates with margin scores.

    `x` and `y` are unit-vector pools (arrays or memmaps); `index` and
    `search_options` (such as `matmul_dtype`) go to `search.knn_both`.
    Returns `(forward, backward)`: lists of `(score, i, j)` rows with `i`
    indexing `x` and `j` indexing `y`; each query keeps one neighbour, chosen
    by `pick` (see `candidates_from_knn`).
    """
    _choice(margin, MARGINS, "margin")
    return candidates_from_knn(*search.knn_both(x, y, k, index, **search_options), margin, pick)


def filled_mean(sims):
    """Row means over the filled (non-NaN) neighbours; NaN for a row with none."""
    filled = ~np.isnan(sims)
    count = filled.sum(axis=1)
    return np.where(count > 0, np.where(filled, sims, 0).sum(axis=1) / np.maximum(count, 1), np.nan)


def best_candidates(sims, idx, mean_query, neighbour_means, margin="ratio", pick=None):
    """Each query's `(score, neighbour)` from its k-NN `[n, k]` `(sims, idx)`, both `[n]`.

    `neighbour_means` `[n, k]` are the neighbours' own mean k-NN cosines;
    `pick` (one of `PICKS`; None: `PAPER_PICKS[margin]`) chooses the cosine
    nearest (`"nearest"`) or the best margin score among the k
    (`"best_of_k"`). Unfilled neighbours (id < 0) and scores that are not
    finite (no mean) are never chosen; a query left with none scores -inf.
    """
    pick = _choice(pick or PAPER_PICKS[_choice(margin, MARGINS, "margin")], PICKS, "pick")
    with np.errstate(invalid="ignore"):
        two_sided = (mean_query[:, None] + neighbour_means) / 2
        raw = _margin_from(sims, mean_query, two_sided, margin)
    # np.argmax would pick a NaN, so anything not finite (unfilled, no mean) is -inf.
    scores = np.where((idx < 0) | ~np.isfinite(raw), -np.inf, raw)
    # The k-NN come best first, so column 0 is the cosine nearest (unfilled ones come last).
    column = np.argmax(scores, axis=1) if pick == "best_of_k" else np.zeros(len(sims), int)
    rows = np.arange(len(sims))
    return scores[rows, column], idx[rows, column]


def candidates_from_knn(forward_knn, backward_knn, margin="ratio", pick=None):
    """`margin_candidates` from precomputed `(sims, ids)` k-NN both ways, best first.

    Each query keeps the neighbour `best_candidates` picks. Neighbours an
    approximate index left unfilled (id -1, similarity NaN) are ignored in
    the means and never chosen; a sentence with no neighbour found has no
    mean, so no candidate pair involves it.
    """
    (sim_xy, idx_xy), (sim_yx, idx_yx) = forward_knn, backward_knn
    mean_x = filled_mean(sim_xy)  # sum_{z in NN_k(x)} cos(x, z) / k
    mean_y = filled_mean(sim_yx)
    fwd_score, fwd_j = best_candidates(sim_xy, idx_xy, mean_x, mean_y[idx_xy], margin, pick)
    bwd_score, bwd_i = best_candidates(sim_yx, idx_yx, mean_y, mean_x[idx_yx], margin, pick)
    # A query whose neighbours were all left unfilled has no candidate (its best score is -inf).
    forward = [(float(s), i, int(j)) for i, (s, j) in enumerate(zip(fwd_score, fwd_j)) if np.isfinite(s)]
    backward = [(float(s), int(i), j) for j, (s, i) in enumerate(zip(bwd_score, bwd_i)) if np.isfinite(s)]
    return forward, backward


def select(forward, backward, selection="intersect"):
    """Combines directional candidates into `(score, i, j)` pairs, best first."""
    if selection == "forward":
        chosen = forward
    elif selection == "backward":
        chosen = backward
    elif selection == "intersect":
        backward_pairs = {(i, j) for _, i, j in backward}
        chosen = [c for c in forward if (c[1], c[2]) in backward_pairs]
    elif selection == "max":
        chosen, used_i, used_j = [], set(), set()
        for candidate in sorted(forward + backward, reverse=True):
            _, i, j = candidate
            if i not in used_i and j not in used_j:
                chosen.append(candidate)
                used_i.add(i)
                used_j.add(j)
    else:
        raise ValueError(f"Unknown selection {selection!r}; choose from {SELECTIONS}.")
    return sorted(chosen, reverse=True)


def precision_recall_f1(predicted, gold):
    """P, R, F1 of predicted `(i, j)` pairs against a gold set of pairs."""
    predicted, gold = set(predicted), set(gold)
    hits = len(predicted & gold)
    precision = hits / len(predicted) if predicted else 0.0
    recall = hits / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def best_threshold(candidates, gold):
    """The score threshold that maximizes F1 when keeping candidates scoring >= it.

    `candidates` are `(score, i, j)` rows; ties in score are kept or dropped together.
    Returns `(threshold, metrics at that threshold)`.
    """
    gold = set(gold)
    ordered = sorted(candidates, reverse=True)
    best = (float("inf"), {"precision": 0.0, "recall": 0.0, "f1": 0.0})
    hits = 0
    for n, (score, i, j) in enumerate(ordered, start=1):
        hits += (i, j) in gold
        if n < len(ordered) and ordered[n][0] == score:
            continue
        precision, recall = hits / n, hits / len(gold) if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
        if f1 > best[1]["f1"]:
            best = (score, {"precision": precision, "recall": recall, "f1": f1})
    return best


def read_id_sentences(path):
    """`id<TAB>sentence` lines (BUCC format) -> `(ids, sentences)`."""
    ids, sentences = [], []
    for number, line in enumerate(read_lines(path), start=1):
        identifier, sep, sentence = line.partition("\t")
        if not sep:
            raise CorpusError(f"{path}:{number}: expected id<TAB>sentence.")
        ids.append(identifier)
        sentences.append(sentence)
    return ids, sentences


def read_gold(path):
    """`id1<TAB>id2` lines -> a set of id pairs."""
    pairs = set()
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}:{number}: expected id1<TAB>id2.")
        pairs.add((fields[0], fields[1]))
    return pairs


@dataclasses.dataclass(frozen=True)
class MiningSplit:
    """One split of a mining set: the two pools (ids and sentences) and the gold `(source id, target id)` pairs."""

    src_ids: list
    src: list
    tgt_ids: list
    tgt: list
    gold: set


def read_split(files):
    """A `MiningSplit` from `(source file, target file, gold file)` (`id<TAB>sentence` pools, `id1<TAB>id2` gold)."""
    src, tgt, gold = files
    return MiningSplit(*read_id_sentences(src), *read_id_sentences(tgt), read_gold(gold))


def mine(x, y, k=4, margin="ratio", selection="max", threshold=None, index="exact", pick=None, **search_options):
    """Mined `(score, i, j)` pairs of two pools, best first, keeping scores >= `threshold` when given."""
    chosen = select(*margin_candidates(x, y, k, margin, index, pick, **search_options), selection)
    return chosen if threshold is None else [c for c in chosen if c[0] >= threshold]


def _choice(value, choices, what):
    """`value` if it is one of `choices`; a ValueError naming `what` otherwise."""
    if value not in choices:
        raise ValueError(f"Unknown {what} {value!r}; choose from {choices}.")
    return value


@gin.configurable(module="tf_msemb.evaluation")
class MiningEvaluator(Evaluator):
    """BUCC-style bitext mining (seed 001, Sec. 4.2; seed 004, Sec. 6): P/R/F1 of the mined pairs.

    Each split's two pools are mined (`margin_candidates`, `select`); the
    score threshold that maximizes F1 on the train split is kept and applied,
    as it is, to the test split, as BUCC prescribes.

    Args:
        train: `(source file, target file, gold file)`: `id<TAB>sentence` pools and `id1<TAB>id2` gold pairs,
            or a `MiningSplit` built in memory.
        test: the same for the test split, or None.
        k: neighbours per direction of the margin.
        margin: one of `MARGINS`.
        selection: one of `SELECTIONS`.
        pick: one of `PICKS`, or None for the margin's paper's rule (`PAPER_PICKS`).
        index: the search (`search.INDEXES`).
        nprobe: cells visited per query by the ivf indexes.
        matmul_dtype: `"bfloat16"` scores exact search in bfloat16 and re-scores `k + candidate_margin`
            candidates in float32 (`search.exact_knn_both`); `"float32"` (default) is exact throughout.
        candidate_margin: extra candidates re-scored per sentence under bfloat16.
        name: the metric prefix.

    Rows `train` and `test` with `precision`, `recall`, `f1`, the `threshold`
    (out of the means) and the gold pairs as `size`. With a test split the
    summary (`<name>/f1`, what training selects on) is the test row's alone:
    the train row scores the threshold on the data it was tuned on.
    """

    setting_metrics = ("threshold",)

    def __init__(self, train, test=None, k=4, margin="ratio", selection="intersect", index="exact", nprobe=16,
                 name="mining", pick=None, matmul_dtype="float32", candidate_margin=16):
        self.name, self.k = name, k
        self.search_options = {"nprobe": nprobe, "matmul_dtype": search.checked_matmul_dtype(matmul_dtype, index),
                               "candidate_margin": candidate_margin}
        self.margin = _choice(margin, MARGINS, "margin")
        self.pick = _choice(pick or PAPER_PICKS[margin], PICKS, "pick")
        self.selection = _choice(selection, SELECTIONS, "selection")
        self.index = search.checked_index(index)
        splits = {"train": train} | ({"test": test} if test else {})
        self.derived_rows = ("train",) if test else ()
        self.splits = {split: given if isinstance(given, MiningSplit) else
                       read_split(file_tuples([given], ("source", "target", "gold"))[0])
                       for split, given in splits.items()}

    def _mine(self, split, embed):
        """Candidates `(score, src_id, tgt_id)` of a split, and its gold pairs."""
        pools = self.splits[split]
        forward, backward = margin_candidates(embed(pools.src), embed(pools.tgt), self.k, self.margin, self.index,
                                              self.pick, **self.search_options)
        chosen = select(forward, backward, self.selection)
        return [(s, pools.src_ids[i], pools.tgt_ids[j]) for s, i, j in chosen], pools.gold

    def evaluate(self, embed):
        threshold, metrics = best_threshold(*self._mine("train", embed))
        results = {"train": metrics | {"threshold": threshold, "size": len(self.splits["train"].gold)}}
        if "test" in self.splits:
            candidates, gold = self._mine("test", embed)
            kept = [(i, j) for s, i, j in candidates if s >= threshold]
            results["test"] = precision_recall_f1(kept, gold) | {"threshold": threshold, "size": len(gold)}
        return results
