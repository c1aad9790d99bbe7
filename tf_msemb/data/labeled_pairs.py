"""Sentence pairs with a label: STS scores and NLI classes (monolingual stage 1, seed 000).

Readers return `(sentences1, sentences2, targets)`; `make_labeled_dataset`
turns them into batches `{"a": tokens, "b": tokens, "target": [b]}`.
"""

import csv
import json
import os

import gin
import numpy as np
import tensorflow as tf

from tf_msemb.data.distributed import ReplicaInput
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines

NLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}


def read_stsb_tsv(path):
    """STS benchmark TSV: genre, file, year, id, score, s1, s2 (extra trailing fields ignored)."""
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
    """Multilingual STS-b CSV: s1, s2, score; no header."""
    rows = list(csv.reader(read_lines(path)))
    bad = next((i for i, row in enumerate(rows, start=1) if len(row) != 3), None)
    if bad:
        raise CorpusError(f"{path}:{bad}: expected 3 comma-separated fields.")
    return [r[0] for r in rows], [r[1] for r in rows], np.array([float(r[2]) for r in rows], np.float64)


def read_semeval_sts(input_path, gold_path):
    """SemEval STS track files: `STS.input.*.txt` (s1<TAB>s2[<TAB>...]) and `STS.gs.*.txt` (one score a line).

    Pairs whose gold line is blank (left unscored by the organizers) are skipped.
    """
    inputs, gold = read_lines(input_path), read_lines(gold_path)
    if len(inputs) != len(gold):
        raise CorpusError(f"{input_path} has {len(inputs)} lines but {gold_path} has {len(gold)}.")
    first, second, scores = [], [], []
    for number, (line, score) in enumerate(zip(inputs, gold), start=1):
        if not score.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise CorpusError(f"{input_path}:{number}: expected sentence1<TAB>sentence2.")
        try:
            scores.append(float(score))
        except ValueError:
            raise CorpusError(f"{gold_path}:{number}: {score!r} is not a score.") from None
        first.append(fields[0])
        second.append(fields[1])
    return first, second, np.array(scores, np.float64)


def semeval_sts_tracks(directory):
    """`{track: (input_path, gold_path)}` for every `STS.input.<track>.txt` with its `STS.gs.<track>.txt`."""
    if not os.path.isdir(directory):
        raise CorpusError(f"SemEval STS directory not found: {directory}")
    tracks = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("STS.input.") and name.endswith(".txt"):
            track = name[len("STS.input.") : -len(".txt")]
            gold = os.path.join(directory, f"STS.gs.{track}.txt")
            if not os.path.exists(gold):
                raise CorpusError(f"{os.path.join(directory, name)} has no gold file {gold}.")
            tracks[track] = (os.path.join(directory, name), gold)
    if not tracks:
        raise CorpusError(f"No STS.input.*.txt files in {directory}.")
    return tracks


def read_nli_jsonl(path):
    """SNLI / MultiNLI jsonl (`sentence1`, `sentence2`, `gold_label`); unlabeled (`-`) rows are skipped."""
    first, second, labels = [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        try:
            row = json.loads(line)
            label = row["gold_label"]
            if label not in NLI_LABELS:
                continue
            first.append(row["sentence1"])
            second.append(row["sentence2"])
        except (json.JSONDecodeError, KeyError) as e:
            raise CorpusError(f"{path}:{number}: not an NLI record ({e}).") from None
        labels.append(NLI_LABELS[label])
    if not labels:
        raise CorpusError(f"{path}: no labeled NLI pairs.")
    return first, second, np.array(labels, np.int64)


READERS = {"stsb_tsv": read_stsb_tsv, "stsb_csv": read_stsb_csv, "nli_jsonl": read_nli_jsonl}


def read_labeled_pairs(paths, format):
    """`(sentences1, sentences2, targets)` of one file or of several, concatenated in the order given."""
    first, second, targets = [], [], []
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        a, b, target = READERS[format](path)
        first, second = first + list(a), second + list(b)
        targets.append(target)
    if not targets:
        raise ValueError("make_labeled_dataset.path names no file.")
    return first, second, np.concatenate(targets)


def leave_out_held_out(first, second, targets, held_out, format):
    """The pairs none of whose sentences occurs in the `held_out` files (same format), and how many were left out.

    STS-b train shares sentences with STS-b dev (408 of its 5,749 English
    pairs hold one), which the dev table scores: training on them would
    score text training read.
    """
    if not held_out:
        return first, second, targets, 0
    held_out = [held_out] if isinstance(held_out, (str, os.PathLike)) else list(held_out)
    held_first, held_second, _ = read_labeled_pairs(held_out, format)
    sentences = set(held_first) | set(held_second)
    kept = [i for i, (a, b) in enumerate(zip(first, second)) if a not in sentences and b not in sentences]
    if not kept:
        raise CorpusError(f"make_labeled_dataset.exclude leaves no pair: every pair shares a sentence with {held_out}.")
    return [first[i] for i in kept], [second[i] for i in kept], targets[kept], len(first) - len(kept)


@gin.configurable(denylist=["tokenizer", "batch_size", "input_context", "seed"])
def make_labeled_dataset(
    path,
    tokenizer,
    batch_size,
    format="stsb_tsv",
    exclude=(),
    score_scale=5.0,
    shuffle_buffer=10_000,
    seed=0,
    repeat=True,
    input_context=None,
):
    """Batches `{"a", "b": tokens, "target": [b]}` from one labeled pair file or several of one format.

    Several files are read into one set, shuffled together (seed 000's stage
    1: SNLI and MultiNLI; the STS benchmark and its augmentation). Pairs
    with a sentence found in the `exclude` files (the same format: e.g. the
    STS-b dev files the dev table scores) are left out, counted in one
    printed line. STS scores are divided by `score_scale` (to [0, 1], seed
    000); NLI targets are class ids. Under a strategy each input pipeline
    keeps every n-th pair.
    """
    if format not in READERS:
        raise ValueError(f"Unknown labeled-pair format {format!r}; choose from {sorted(READERS)}.")
    first, second, targets, left_out = leave_out_held_out(*read_labeled_pairs(path, format), exclude, format)
    if left_out:
        print(f"make_labeled_dataset: {left_out} of {len(first) + left_out} pairs left out, sharing a sentence "
              f"with make_labeled_dataset.exclude")
    targets = targets / score_scale if format.startswith("stsb") else targets
    dataset = tf.data.Dataset.from_tensor_slices((first, second, targets.astype(np.float32)))
    if input_context and input_context.num_input_pipelines > 1:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if repeat:
        dataset = dataset.repeat()
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed)

    def tokenize(a, b, target):
        return {"a": tokenizer(a), "b": tokenizer(b), "target": target}

    batches = dataset.batch(batch_size, drop_remainder=True).map(tokenize).prefetch(tf.data.AUTOTUNE)
    batches.corpora = [str(path)]  # what exports record as their data
    return batches


def make_distributed_labeled_dataset(strategy, global_batch_size, features=(), **kwargs):
    """`make_labeled_dataset` under a strategy (per-replica batches).

    Labeled pairs carry no translation-pair features; an objective that
    declares some needs `make_distributed_dataset`.
    """
    if features:
        names = ", ".join(type(feature).__name__ for feature in features)
        raise ValueError(f"Labeled-pair batches cannot carry {names}; set train.dataset_fn = "
                         "@make_distributed_dataset for this objective.")

    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        return make_labeled_dataset(batch_size=per_replica, input_context=input_context, **kwargs)

    return ReplicaInput(strategy, global_batch_size, dataset_fn)
