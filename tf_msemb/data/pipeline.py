"""The `tf.data` input pipeline for translation pairs.

read shards (interleaved) -> balanced sampling over corpora and language pairs
-> shuffle -> parse + tokenize in chunks, applying the objective's input
features -> drop (or truncate) pairs over `max_tokens` -> batch (`drop_remainder` so every
replica gets equal, static batches).
"""

import gin
import tensorflow as tf

from tf_msemb.data.corpora import balanced_records
from tf_msemb.data.distributed import ReplicaInput
from tf_msemb.data.features import StoredTokenIds
from tf_msemb.data.features import TextTokens
from tf_msemb.data.records import check_shards
from tf_msemb.data.records import parse_examples
from tf_msemb.text_files import CorpusError

_CHUNK = 512


@gin.configurable(denylist=["tokenizer", "batch_size", "input_context", "seed", "features"])
def make_dataset(corpora, tokenizer, batch_size, features=(), max_tokens=128, corpus_weights=None, pair_weights=None,
                 proportional=False, shuffle_buffer=10_000, seed=0, repeat=True, drop_remainder=True,
                 input_context=None, bucket_boundaries=None, pretokenized=False, truncate=False):
    """Batches of `{"src": tokens, "tgt": tokens}` plus the fields of `features`.

    `tokens` is the tokenizer's `{"token_ids", "padding_mask"}`, padded to
    the longest sequence in the batch. Pairs where either side has more than
    `max_tokens` tokens (special tokens included) are dropped; with
    `truncate`, such a side is cut to its first `max_tokens` tokens instead,
    its end token kept (seed 003 truncates to 120 tokens, Sec. IV-C).
    `features` are `data.features.InputFeature`s (what the objective
    declares). With `pretokenized`, the token ids stored at writing time are
    read instead of tokenizing the text. With `bucket_boundaries` (token
    counts, e.g. `[16, 24, 32, 48, 64]`), pairs are batched with others of
    similar length (the longer side decides the bucket): less padding, the
    same examples, batches grouped by length instead of mixed.
    The first record of every shard is checked before reading starts; the
    returned dataset's `source_files` lists the shards, so a record found
    corrupt later can be traced to its file (`find_corrupt_shard`), and its
    `corpora` the corpora as given (what exports record as their data).
    """
    corpora = [corpora] if isinstance(corpora, str) else list(corpora)
    if max_tokens > tokenizer.max_length:
        raise ValueError(f"max_tokens={max_tokens} exceeds the tokenizer's max_length={tokenizer.max_length}; "
                         "pairs that long could not be encoded whole.")
    if not corpora:
        raise CorpusError("No corpora given: set make_dataset.corpora to manifests or TFRecord globs.")
    features = [StoredTokenIds() if pretokenized else TextTokens(), *features]
    records, shards = balanced_records(corpora, seed, input_context, repeat, corpus_weights, pair_weights,
                                       proportional, shuffle_buffer)
    for feature in features:
        feature.prepare(tokenizer, corpora)
    check_shards(shards, features)

    def parse(serialized):
        parsed = parse_examples(serialized, features)
        return {name: value for feature in features for name, value in feature.parse(parsed, tokenizer).items()}

    def per_example(example):
        for feature in features:
            example = feature.per_example(example, tokenizer)
        return example

    def longer_side(example):
        return tf.maximum(tf.size(example["src"]["token_ids"]), tf.size(example["tgt"]["token_ids"]))

    def truncated(example):
        for side in ("src", "tgt"):
            ids = example[side]["token_ids"]
            if tokenizer.add_eos:
                # The last token (the end token) follows the first max_tokens - 1 of a longer side.
                ids = tf.concat([ids[: max_tokens - 1], ids[max_tokens - 1 :][-1:]], axis=0)
            else:
                ids = ids[:max_tokens]
            example[side] = {"token_ids": ids, "padding_mask": tf.ones_like(ids, dtype=tf.bool)}
        return example

    examples = (records.batch(_CHUNK).map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .unbatch())
    if truncate:
        examples = examples.map(truncated)
    else:
        examples = examples.filter(lambda example: longer_side(example) <= max_tokens)
    examples = examples.map(per_example)
    padding = {name: value for feature in features for name, value in feature.padding(tokenizer).items()}
    if bucket_boundaries:
        batches = examples.bucket_by_sequence_length(
            longer_side,
            bucket_boundaries=list(bucket_boundaries),
            bucket_batch_sizes=[batch_size] * (len(bucket_boundaries) + 1),
            padding_values=padding,
            drop_remainder=drop_remainder,
        )
    else:
        batches = examples.padded_batch(batch_size, padding_values=padding, drop_remainder=drop_remainder)
    for feature in features:
        batches = feature.attach(batches, tokenizer, input_context, seed)
    batches = batches.prefetch(tf.data.AUTOTUNE)
    batches.source_files = shards
    batches.corpora = [str(corpus) for corpus in corpora]
    return batches


def make_distributed_dataset(strategy, global_batch_size, **kwargs):
    """`make_dataset` under a strategy: one pipeline per replica (a checkpointable `ReplicaInput`)."""

    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        return make_dataset(batch_size=per_replica, input_context=input_context, **kwargs)

    return ReplicaInput(strategy, global_batch_size, dataset_fn)
