"""Semantic textual similarity: correlation of cosine similarity with gold scores.

The readers live in `tf_msemb.data.labeled_pairs`. Multilingual STS-b files
of different languages are row-aligned, so `cross_lingual` pairs sentence 1 of
one language with sentence 2 of another (seed 001, Sec. 4.2).
"""

import numpy as np
from scipy import stats

from tf_msemb.text_files import CorpusError


def cross_lingual(set_a, set_b):
    """Sentence 1 from `set_a`, sentence 2 from `set_b` (row-aligned sets), gold from `set_a`."""
    if len(set_a[0]) != len(set_b[0]):
        raise CorpusError(f"Row-aligned STS sets differ in size: {len(set_a[0])} vs {len(set_b[0])}.")
    return set_a[0], set_b[1], set_a[2]


def row_cosines(embeddings1, embeddings2):
    """Cosine of each row pair."""
    norms = np.linalg.norm(embeddings1, axis=1) * np.linalg.norm(embeddings2, axis=1)
    return np.sum(embeddings1 * embeddings2, axis=1) / np.maximum(norms, 1e-12)


def correlations(cosine, gold):
    """Spearman and Pearson correlation x100 between cosines and gold scores."""
    return {
        "spearman": 100 * float(stats.spearmanr(cosine, gold).statistic),
        "pearson": 100 * float(stats.pearsonr(cosine, gold).statistic),
        "size": int(len(gold)),
    }


def language_bias(scored_sets):
    """Seed 001 Sec. 7: all sets scored as one pool versus the mean of the separate sets.

    `scored_sets` is a list of `(cosines, gold)`. Returns the joined set's
    correlations and `difference` = joined - mean of separate (negative =
    the model prefers some language pairs over others).
    """
    separate = [correlations(c, g) for c, g in scored_sets]
    joined = correlations(np.concatenate([c for c, _ in scored_sets]), np.concatenate([g for _, g in scored_sets]))
    difference = {
        key: joined[key] - float(np.mean([s[key] for s in separate])) for key in ("spearman", "pearson")
    }
    return joined, difference | {"size": joined["size"]}
