"""Semantic textual similarity: correlation of cosine similarity with gold scores.

The readers live in `tf_msemb.data.labeled_pairs`. Multilingual STS-b files
of different languages are row-aligned, so `cross_lingual` pairs sentence 1 of
one language with sentence 2 of another (seed 001, Sec. 4.2).
"""

import numpy as np
from scipy import stats

from tf_msemb.data.text_files import CorpusError


def cross_lingual(set_a, set_b):
    """Sentence 1 from `set_a`, sentence 2 from `set_b` (row-aligned sets), gold from `set_a`."""
    if len(set_a[0]) != len(set_b[0]):
        raise CorpusError(f"Row-aligned STS sets differ in size: {len(set_a[0])} vs {len(set_b[0])}.")
    return set_a[0], set_b[1], set_a[2]


def similarity_correlations(embeddings1, embeddings2, gold):
    """Spearman and Pearson correlation x100 between row cosines and gold scores."""
    norms = np.linalg.norm(embeddings1, axis=1) * np.linalg.norm(embeddings2, axis=1)
    cosine = np.sum(embeddings1 * embeddings2, axis=1) / np.maximum(norms, 1e-12)
    return {
        "spearman": 100 * float(stats.spearmanr(cosine, gold).statistic),
        "pearson": 100 * float(stats.pearsonr(cosine, gold).statistic),
        "size": int(len(gold)),
    }
