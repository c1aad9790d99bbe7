"""Semantic textual similarity: correlation of cosine similarity with gold scores.

The readers live in `tf_msemb.data.labeled_pairs`. Multilingual STS-b files
of different languages are row-aligned, so `cross_lingual` pairs sentence 1 of
one language with sentence 2 of another (seed 001, Sec. 4.1).
"""

import os

import gin
import numpy as np
from scipy import stats

from tf_msemb.data.labeled_pairs import read_semeval_sts
from tf_msemb.data.labeled_pairs import read_stsb_csv
from tf_msemb.data.labeled_pairs import read_stsb_tsv
from tf_msemb.data.labeled_pairs import semeval_sts_tracks
from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.evaluator import named_files
from tf_msemb.evaluation.evaluator import path_list
from tf_msemb.text_files import CorpusError


def cross_lingual(set_a, set_b, names=("the first set", "the second set")):
    """Sentence 1 from `set_a`, sentence 2 from `set_b` (row-aligned sets), gold from `set_a`."""
    if len(set_a[0]) != len(set_b[0]):
        raise CorpusError(f"Row-aligned STS sets differ in size: {names[0]} has {len(set_a[0])} pairs, "
                          f"{names[1]} {len(set_b[0])}.")
    return set_a[0], set_b[1], set_a[2]


def row_cosines(embeddings1, embeddings2):
    """Cosine of each row pair."""
    norms = np.linalg.norm(embeddings1, axis=1) * np.linalg.norm(embeddings2, axis=1)
    return np.sum(embeddings1 * embeddings2, axis=1) / np.maximum(norms, 1e-12)


def set_cosines(sets, embed):
    """`{name: cosine of each row}` of `sts_sets`-style sets under `embed`."""
    return {name: row_cosines(embed(first), embed(second)) for name, (first, second, _) in sets.items()}


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


def sts_sets(tsv_files=(), stsb_dir=None, stsb_pairs=(), split="dev", semeval_dir=None):
    """`{name: (sentences1, sentences2, gold)}` of STS benchmark TSVs, SemEval tracks and STS-b language pairs."""
    files = [(path,) for path in path_list(tsv_files)]
    named = named_files(files, ("tsv",), "STSEvaluator.tsv_files") if files else []
    sets = {name: read_stsb_tsv(path) for name, (path,) in named}
    if semeval_dir:
        for track, paths in semeval_sts_tracks(semeval_dir).items():
            sets[f"semeval {track}"] = read_semeval_sts(*paths)
    for pair in path_list(stsb_pairs):
        languages = pair.split("-")
        if len(languages) != 2 or stsb_dir is None:
            raise CorpusError(f"STS-b pair {pair!r} (STSEvaluator.stsb_pairs, --stsb_pair) needs the form L1-L2 and "
                              "an STS-b directory (STSEvaluator.stsb_dir, --stsb_dir).")
        paths = [os.path.join(stsb_dir, f"stsb-{lang}-{split}.csv") for lang in languages]
        sets[f"stsb {split} {pair}"] = cross_lingual(*map(read_stsb_csv, paths), names=paths)
    return sets


@gin.configurable(module="tf_msemb.evaluation")
class STSEvaluator(Evaluator):
    """Spearman and Pearson x100 of cosine vs gold for each STS set (seed 001, Sec. 4.1).

    Args:
        tsv_files: STS benchmark TSV files (a set each, named by file).
        stsb_dir: directory of multilingual STS-b CSVs, `stsb-<lang>-<split>.csv`.
        stsb_pairs: language pairs `L1-L2` of `stsb_dir`: sentence 1 in L1, sentence 2 in L2 (`cross_lingual`).
        split: split of the STS-b files.
        semeval_dir: directory of SemEval `STS.input.<track>.txt` + `STS.gs.<track>.txt` files, a set per track.
        joined: also report all sets scored as one pool ("joined") and the "language bias", joined minus
            the mean of the separate sets (seed 001, Sec. 7, Table 8); these rows stay out of the means.
        name: the metric prefix.
    """

    derived_rows = ("joined", "language bias")

    def __init__(self, tsv_files=(), stsb_dir=None, stsb_pairs=(), split="dev", semeval_dir=None, joined=False,
                 name="sts"):
        self.name, self.joined = name, joined
        self.sets = sts_sets(tsv_files, stsb_dir, stsb_pairs, split, semeval_dir)
        if not self.sets:
            raise CorpusError("STSEvaluator needs tsv_files, semeval_dir, or stsb_dir with stsb_pairs.")
        for set_name, (_, _, gold) in self.sets.items():
            if len(gold) < 2:
                raise CorpusError(f"STS set {set_name} has {len(gold)} pair(s); a correlation needs at least 2.")

    def evaluate(self, embed):
        cosines = set_cosines(self.sets, embed)
        results = {name: correlations(cosine, self.sets[name][2]) for name, cosine in cosines.items()}
        if self.joined:
            results["joined"], results["language bias"] = language_bias(
                [(cosine, self.sets[name][2]) for name, cosine in cosines.items()])
        return results
