"""The `tf.data` input pipeline for translation pairs.

read shards (interleaved) -> balanced sampling over corpora and language pairs
-> shuffle -> parse + tokenize in chunks -> drop pairs over `max_tokens`
-> batch (`drop_remainder` so every replica gets equal, static batches).

A corpus is either a manifest written by `tools/make_tfrecords.py` (then each
language pair in it is its own stream) or a file glob (one stream).
"""

import glob
import json
import os

import gin
import tensorflow as tf

from tf_msemb.data.distributed import ReplicaInput
from tf_msemb.data.labeled_pairs import make_labeled_dataset
from tf_msemb.data.records import check_shards
from tf_msemb.data.records import parse_examples
from tf_msemb.text_files import CorpusError
from tf_msemb.data.writing import MANIFEST_SUFFIX
from tf_msemb.text.vocabulary import language_token

_CHUNK = 512


def corpus_streams(corpus):
    """Returns `{stream_name: (files, examples or None)}` for one corpus spec."""
    if corpus.endswith(MANIFEST_SUFFIX):
        if not os.path.exists(corpus):
            raise CorpusError(f"Manifest not found: {corpus}")
        with open(corpus, encoding="utf-8") as f:
            manifest = json.load(f)
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


def language_token_table(tokenizer, languages):
    """A lookup from language tag to the id of its `<2xx>` token (seed 003's language tokens).

    Every tag must have its own token in the vocabulary; tags missing from
    the table map to -1, which the pipeline reports as an unknown tag.
    """
    if not hasattr(tokenizer, "token_to_id"):
        raise ValueError(f"{type(tokenizer).__name__} has no language tokens; use a SentencePieceTokenizer "
                         "trained by tools/train_spm.py --languages=...")
    if not languages:
        raise CorpusError("Language ids need manifests (from make_tfrecords.py) or make_dataset.languages.")
    ids = {}
    for language in languages:
        ids[language] = tokenizer.token_to_id(language_token(language))
        if ids[language] == tokenizer.unk_id:
            raise CorpusError(
                f"Language {language!r} has no {language_token(language)} token in the tokenizer vocabulary; "
                f"retrain it with tools/train_spm.py --languages={','.join(languages)}"
            )
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(list(ids), list(ids.values()), tf.string, tf.int32), default_value=-1
    ), sorted(ids)


def _check_pretokenized(corpora, tokenizer):
    """Pretokenized corpora must be manifests written with this tokenizer; says how to fix it otherwise."""
    expected = tokenizer.fingerprint()
    for corpus in corpora:
        stored = None
        if corpus.endswith(MANIFEST_SUFFIX) and os.path.exists(corpus):
            with open(corpus, encoding="utf-8") as f:
                stored = json.load(f).get("tokenizer")
        if not stored or stored["fingerprint"] != expected:
            found = f"token ids of another tokenizer ({stored['class']} {stored['fingerprint']})" if stored else \
                "no token ids"
            raise CorpusError(
                f"make_dataset.pretokenized is set but {corpus} has {found}; the training tokenizer is "
                f"{type(tokenizer).__name__} {expected}. Rewrite it with tools/make_tfrecords.py --tokenizer=... "
                "or set make_dataset.pretokenized = False."
            )


def _read_stream(files, seed, input_context, repeat):
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


@gin.configurable(denylist=["tokenizer", "batch_size", "input_context", "seed", "teacher_dim", "teacher_tokenizer",
                           "num_hard_negatives", "language_ids"])
def make_dataset(
    corpora,
    tokenizer,
    batch_size,
    max_tokens=128,
    corpus_weights=None,
    pair_weights=None,
    proportional=False,
    shuffle_buffer=10_000,
    seed=0,
    teacher_dim=None,
    repeat=True,
    drop_remainder=True,
    input_context=None,
    include_text=False,
    teacher_tokenizer=None,
    num_hard_negatives=None,
    language_ids=False,
    languages=None,
    bucket_boundaries=None,
    pretokenized=False,
):
    """Batches of `{"src": tokens, "tgt": tokens[, "teacher": [b, d]]}`.

    `tokens` is the tokenizer's `{"token_ids", "padding_mask"}`, padded to
    the longest sequence in the batch. Pairs where either side has more than
    `max_tokens` tokens (special tokens included) are dropped, not truncated.
    With `teacher_tokenizer`, `teacher_src` holds the source in a live
    teacher's own tokens (truncated to its length, never filtered); with
    `include_text` the raw `src_text`/`tgt_text` strings come along.
    With `num_hard_negatives=h`, `hard_negatives` holds each pair's h
    hard negatives as tokens `[b, h, length]` (truncated to the tokenizer's
    `max_length`; records must hold exactly h). With `language_ids`,
    `src_lang_id`/`tgt_lang_id` `[b]` are the ids of the `<2xx>` tokens of
    the pair's tags, for `languages` (default: those the manifests name).
    With `pretokenized`, the token ids stored at writing time
    (`make_tfrecords.py --tokenizer`) are read instead of tokenizing the
    text; the manifests must name this very tokenizer (its fingerprint).
    With `bucket_boundaries` (token counts, e.g. `[16, 24, 32, 48, 64]`),
    pairs are batched with others of similar length (the longer side decides
    the bucket), so batches carry little padding: faster steps, the same
    examples, batches grouped by length instead of mixed.
    The first record of every shard is checked before reading starts; the
    returned dataset's `source_files` lists the shards, so a record found
    corrupt later can be traced to its file (`find_corrupt_shard`).
    """
    if isinstance(corpora, str):
        corpora = [corpora]
    if max_tokens > tokenizer.max_length:
        raise ValueError(
            f"max_tokens={max_tokens} exceeds the tokenizer's max_length={tokenizer.max_length}; "
            "pairs that long could not be encoded whole."
        )
    if not corpora:
        raise CorpusError("No corpora given: set make_dataset.corpora to manifests or TFRecord globs.")
    leaves = stream_weights(corpora, corpus_weights, pair_weights, proportional)
    shards = [path for files, _ in leaves for path in files]
    if pretokenized:
        _check_pretokenized(corpora, tokenizer)
    check_shards(shards, teacher_dim, num_hard_negatives, pretokenized)
    if language_ids:
        language_table, known_languages = language_token_table(tokenizer, languages or corpus_languages(corpora))
    streams = [_read_stream(files, seed + i, input_context, repeat) for i, (files, _) in enumerate(leaves)]
    if len(streams) == 1:
        records = streams[0]
    else:
        records = tf.data.Dataset.sample_from_datasets(
            streams, weights=[w for _, w in leaves], seed=seed, stop_on_empty_dataset=False
        )
    if shuffle_buffer:
        records = records.shuffle(shuffle_buffer, seed=seed)

    def language_id(tags):
        known = " ".join(known_languages)
        ids = language_table.lookup(tags)
        unknown = tf.boolean_mask(tags, ids < 0)
        check = tf.debugging.Assert(
            tf.size(unknown) == 0,
            ["Unknown language tag", unknown[:1], f"in the corpus; the tokenizer knows {known}"],
        )
        with tf.control_dependencies([check]):
            return tf.identity(ids)

    def parse_and_tokenize(serialized):
        features = parse_examples(serialized, teacher_dim=teacher_dim, num_hard_negatives=num_hard_negatives,
                                  token_ids=pretokenized)
        if pretokenized:
            out = {side: tf.cast(features[f"{side}_ids"], tf.int32) for side in ("src", "tgt")}
        else:
            out = {side: tokenizer.tokenize(features[side], truncate=False) for side in ("src", "tgt")}
        if num_hard_negatives:
            flat = tokenizer.tokenize(tf.reshape(features["hard_negatives"], [-1]))
            out["hard_negatives"] = tf.RaggedTensor.from_uniform_row_length(flat, num_hard_negatives)
        if language_ids:
            out.update(src_lang_id=language_id(features["src_lang"]), tgt_lang_id=language_id(features["tgt_lang"]))
        if teacher_dim is not None:
            out["teacher"] = features["teacher"]
        if teacher_tokenizer is not None:
            out["teacher_src"] = teacher_tokenizer.tokenize(features["src"])
        if include_text:
            out.update(src_text=features["src"], tgt_text=features["tgt"])
        return out

    def short_enough(example):
        return (tf.size(example["src"]) <= max_tokens) & (tf.size(example["tgt"]) <= max_tokens)

    token_fields = ("src", "tgt") + (("teacher_src",) if teacher_tokenizer is not None else ())

    def to_model_inputs(example):
        for side in token_fields:
            ids = example[side]
            example[side] = {"token_ids": ids, "padding_mask": tf.ones_like(ids, dtype=tf.bool)}
        if num_hard_negatives:
            ids = example["hard_negatives"]
            example["hard_negatives"] = {
                "token_ids": ids.to_tensor(default_value=tokenizer.pad_id),
                "padding_mask": ids.with_values(tf.ones_like(ids.flat_values, tf.bool)).to_tensor(default_value=False),
            }
        return example

    examples = (
        records.batch(_CHUNK)
        .map(parse_and_tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .unbatch()
        .filter(short_enough)
        .map(to_model_inputs)
    )
    padding = {
        side: {"token_ids": tf.constant(tokenizer.pad_id, tf.int32), "padding_mask": False} for side in ("src", "tgt")
    }
    if teacher_tokenizer is not None:
        padding["teacher_src"] = {"token_ids": tf.constant(teacher_tokenizer.pad_id, tf.int32), "padding_mask": False}
    if teacher_dim is not None:
        padding["teacher"] = 0.0
    if num_hard_negatives:
        padding["hard_negatives"] = {"token_ids": tf.constant(tokenizer.pad_id, tf.int32), "padding_mask": False}
    if language_ids:
        padding.update(src_lang_id=tf.constant(0, tf.int32), tgt_lang_id=tf.constant(0, tf.int32))
    if include_text:
        padding.update(src_text="", tgt_text="")
    if bucket_boundaries:
        batches = examples.bucket_by_sequence_length(
            lambda example: tf.maximum(tf.shape(example["src"]["token_ids"])[0],
                                       tf.shape(example["tgt"]["token_ids"])[0]),
            bucket_boundaries=list(bucket_boundaries),
            bucket_batch_sizes=[batch_size] * (len(bucket_boundaries) + 1),
            padding_values=padding,
            drop_remainder=drop_remainder,
        )
    else:
        batches = examples.padded_batch(batch_size, padding_values=padding, drop_remainder=drop_remainder)
    batches = batches.prefetch(tf.data.AUTOTUNE)
    batches.source_files = shards
    return batches


def _check_nli_bindings():
    """The NLI multi-task input must be bound in gin; says what to bind when it is not."""
    try:
        path = gin.query_parameter("make_labeled_dataset.path")
        nli_format = gin.query_parameter("make_labeled_dataset.format")
    except ValueError:
        path = nli_format = None
    if not path or nli_format != "nli_jsonl":
        raise CorpusError("The NLI multi-task head needs make_labeled_dataset.path (an SNLI/MultiNLI jsonl file) "
                          "and make_labeled_dataset.format = 'nli_jsonl' in the gin config.")


def make_distributed_dataset(strategy, global_batch_size, nli_global_batch_size=None, **kwargs):
    """`make_dataset` under a strategy: one pipeline per replica (a checkpointable `ReplicaInput`).

    With `nli_global_batch_size`, each batch also carries `nli`: a batch of
    labeled NLI pairs from `make_labeled_dataset` (its path and format bound
    in gin), for multi-task objectives (seed 002 Appendix B).
    """
    if nli_global_batch_size:
        _check_nli_bindings()

    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        pairs = make_dataset(batch_size=per_replica, input_context=input_context, **kwargs)
        if not nli_global_batch_size:
            return pairs
        nli = make_labeled_dataset(
            tokenizer=kwargs["tokenizer"],
            batch_size=input_context.get_per_replica_batch_size(nli_global_batch_size),
            seed=kwargs.get("seed", 0),
            input_context=input_context,
        )
        zipped = tf.data.Dataset.zip(pairs, nli).map(lambda batch, nli_batch: batch | {"nli": nli_batch})
        zipped.source_files = pairs.source_files
        return zipped

    return ReplicaInput(strategy, global_batch_size, dataset_fn)
