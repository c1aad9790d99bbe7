"""How many of exact margin mining's candidates an approximate run keeps, measured on a sample of sentences.

Exact mining of a 10M-sentence pool scores 10^14 pairs; the exact
candidates of a few thousand sentences cost only their own k-NN and their
neighbours' k-NN (`exact_candidates`), whatever the pool's size. An
approximate run keeps a pair when it gives the sentence the same partner
(`candidate_recall`); the selection that follows is a function of the
candidates, so pairs whose candidates and scores agree are mined alike.
"""

import numpy as np

from tf_msemb.evaluation import mining
from tf_msemb.evaluation import search


def exact_candidates(queries, pool, other, k=4, margin="ratio", pick=None, chunk_size=100_000):
    """`(scores, partners)` of each query's best candidate in `pool` by exact search.

    `queries` are rows of the query side, `other` that whole side (where
    the neighbours' own k nearest are searched, for their means).
    """
    sims, rows = search.exact_knn(queries, pool, k, chunk_size)
    neighbours, position = np.unique(rows, return_inverse=True)
    neighbour_sims, _ = search.exact_knn(pool[neighbours], other, k, chunk_size)
    neighbour_means = neighbour_sims.mean(axis=1)[position.reshape(rows.shape)]
    return mining.best_candidates(sims, rows, sims.mean(axis=1), neighbour_means, margin, pick)


def candidate_recall(exact_scores, exact_partners, scores, partners, threshold):
    """The share of exact candidates scoring at least `threshold` that the approximate run keeps.

    It keeps one when it names the same partner and scores it at least
    `threshold` too (its margin comes from approximate neighbours' means).
    Returns `{"recall", "found", "exact"}` (`recall` is 1 when no exact
    candidate reaches the threshold).
    """
    wanted = exact_scores >= threshold
    found = int(np.sum(wanted & (partners == exact_partners) & (scores >= threshold)))
    total = int(np.sum(wanted))
    return {"recall": found / total if total else 1.0, "found": found, "exact": total}
