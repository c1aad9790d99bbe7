"""Semantic textual similarity: correlation of cosine similarity with gold scores.

Readers:
- STS benchmark TSV (`sts-dev.csv`): genre, file, year, id, score, s1, s2
  (a few rows carry extra trailing fields, which are ignored);
- multilingual STS-b CSV (`stsb-de-dev.csv`): s1, s2, score, no header; files of
  different languages are row-aligned, so `cross_lingual` pairs sentence 1 of
  one language with sentence 2 of another (seed 001, Sec. 4.2).
"""

import csv

import numpy as np
from scipy import stats

from tf_msemb.data.text_files import CorpusError
from tf_msemb.data.text_files import read_lines


def read_stsb_tsv(path):
    """Returns `(sentences1, sentences2, scores)`."""
    first, second, scores = [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) < 7:
            raise CorpusError(f"{path}:{number}: expected 7 tab-separated fields, got {len(fields)}.")
        scores.append(float(fields[4]))
        first.append(fields[5])
        second.append(fields[6])
    return first, second, np.array(scores, np.float64)


def read_stsb_csv(path):
    """Returns `(sentences1, sentences2, scores)` of a multilingual STS-b CSV."""
    rows = list(csv.reader(read_lines(path)))
    bad = next((i for i, row in enumerate(rows, start=1) if len(row) != 3), None)
    if bad:
        raise CorpusError(f"{path}:{bad}: expected 3 comma-separated fields.")
    return [r[0] for r in rows], [r[1] for r in rows], np.array([float(r[2]) for r in rows], np.float64)


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
