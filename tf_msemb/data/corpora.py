"""Corpora on disk: manifests or shard globs, their (corpus, language pair) streams and sampling weights.

A corpus is either a manifest written by `tools/make_tfrecords.py` (then each
language pair in it is its own stream) or a file glob (one stream).
"""

import glob
import json
import os

import tensorflow as tf

from tf_msemb.data.records import parse_examples
from tf_msemb.data.writing import MANIFEST_SUFFIX
from tf_msemb.text_files import CorpusError


def read_manifest(corpus):
    """The manifest of a corpus spec, or None for a glob."""
    if not corpus.endswith(MANIFEST_SUFFIX):
        return None
    if not os.path.exists(corpus):
        raise CorpusError(f"Manifest not found: {corpus}")
    with open(corpus, encoding="utf-8") as f:
        return json.load(f)


def corpus_streams(corpus):
    """Returns `{stream_name: (files, examples or None)}` for one corpus spec."""
    manifest = read_manifest(corpus)
    if manifest is not None:
        root = os.path.dirname(corpus)
        streams = {
            pair: ([os.path.join(root, name) for name in info["files"]], info["examples"])
            for pair, info in manifest["pairs"].items()
            if info["examples"] > 0
        }
        for files, _ in streams.values():
            for path in files:
                if not os.path.exists(path):
                    raise CorpusError(f"Shard listed in {corpus} is missing: {path}")
    else:
        files = sorted(glob.glob(corpus))
        streams = {"all": (files, None)} if files else {}
    if not streams:
        raise CorpusError(f"Corpus {corpus!r} has no data (no matching shards, or zero examples).")
    return streams


def stream_weights(corpora, corpus_weights=None, pair_weights=None, proportional=False):
    """Sampling probability of every (corpus, language pair) stream.

    By default each corpus gets an equal share and, within it, each language
    pair an equal share (seed 001: "roughly equal probability per corpus";
    seed 000: the same number of pairs per language). `corpus_weights` and
    `pair_weights` (e.g. `{"en-de": 2.0}`) rescale shares; `proportional`
    samples pairs in proportion to their size instead.
    Returns a list of `(files, weight)` whose weights sum to one.
    """
    corpus_weights = corpus_weights or {}
    pair_weights = pair_weights or {}
    unknown = set(corpus_weights) - set(corpora)
    if unknown:
        raise ValueError(f"corpus_weights names corpora that are not in `corpora`: {sorted(unknown)}")
    leaves = []
    for corpus in corpora:
        streams = corpus_streams(corpus)
        shares = {}
        for name, (files, examples) in streams.items():
            base = float(examples or 1) if proportional else 1.0
            shares[name] = base * pair_weights.get(name, 1.0)
        total = sum(shares.values())
        weight = corpus_weights.get(corpus, 1.0)
        leaves.extend((streams[name][0], weight * share / total) for name, share in shares.items())
    norm = sum(w for _, w in leaves)
    if norm <= 0:
        raise ValueError("All corpus/pair weights are zero.")
    return [(files, w / norm) for files, w in leaves]


def corpus_languages(corpora):
    """Language tags named by the manifests' pairs (`en-de` -> en, de); globs name none."""
    languages = set()
    for corpus in corpora:
        if corpus.endswith(MANIFEST_SUFFIX):
            for pair in corpus_streams(corpus):
                languages.update(pair.split("-"))
    return sorted(languages)


def read_stream(files, seed, input_context, repeat):
    """Interleaved records of `files`, this input pipeline's share only.

    Files are split across pipelines when there are enough of them; otherwise
    every pipeline reads all files in the same seeded order and keeps every
    n-th record.
    """
    pipelines = input_context.num_input_pipelines if input_context else 1
    by_record = pipelines > 1 and len(files) < pipelines
    file_names = tf.data.Dataset.from_tensor_slices(files)
    if pipelines > 1 and not by_record:
        file_names = file_names.shard(pipelines, input_context.input_pipeline_id)
    records = file_names.shuffle(len(files), seed=seed).interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(len(files), 8),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if by_record:
        records = records.shard(pipelines, input_context.input_pipeline_id)
    return records.repeat() if repeat else records


def balanced_records(corpora, seed=0, input_context=None, repeat=True, corpus_weights=None, pair_weights=None,
                     proportional=False, shuffle_buffer=10_000):
    """Serialized records of all streams, sampled by `stream_weights` and shuffled; and the shard paths read."""
    leaves = stream_weights(corpora, corpus_weights, pair_weights, proportional)
    streams = [read_stream(files, seed + i, input_context, repeat) for i, (files, _) in enumerate(leaves)]
    records = streams[0] if len(streams) == 1 else tf.data.Dataset.sample_from_datasets(
        streams, weights=[w for _, w in leaves], seed=seed, stop_on_empty_dataset=False
    )
    if shuffle_buffer:
        records = records.shuffle(shuffle_buffer, seed=seed)
    return records, [path for files, _ in leaves for path in files]


def record_pairs(corpus):
    """`(src_lang, tgt_lang, [(src, tgt)])` of every language pair the records of `corpus` hold, in record order."""
    pairs = {}
    for files, _ in corpus_streams(corpus).values():
        for batch in tf.data.TFRecordDataset(files).batch(4096).map(parse_examples):
            fields = [[value.decode("utf-8") for value in batch[name].numpy()]
                      for name in ("src_lang", "tgt_lang", "src", "tgt")]
            for src_lang, tgt_lang, src, tgt in zip(*fields):
                pairs.setdefault((src_lang, tgt_lang), []).append((src, tgt))
    for (src_lang, tgt_lang), rows in pairs.items():
        yield src_lang, tgt_lang, rows
