"""Turning parallel corpora (`data.readers`' sources) into sharded TFRecords plus a manifest.

Shards are written per language pair, `<prefix>.<src>-<tgt>.tfrecord-00000-of-00004`,
and `<prefix>.manifest.json` lists each pair's files and counts, which is what
the input pipeline uses to balance language pairs.
"""

import collections
import json
import os

import keras
import tensorflow as tf

from tf_msemb.data.records import make_example
from tf_msemb.text_files import CorpusError

MANIFEST_SUFFIX = ".manifest.json"
_WRITE_CHUNK = 1024
DROP_REASONS = ("dropped_empty", "dropped_long", "dropped_duplicate")


def clean_row(row, max_chars):
    """`(reason, row)`: a `(src, tgt, *hard negatives)` row with each sentence's whitespace runs made one space.

    `reason` is None for a kept row, or the count it is dropped under:
    `"dropped_empty"` (a side is blank) or `"dropped_long"` (a side is over
    `max_chars` characters).
    """
    src, tgt, *negatives = (" ".join(text.split()) for text in row)
    if not src or not tgt:
        return "dropped_empty", None
    if max(len(src), len(tgt)) > max_chars:
        return "dropped_long", None
    return None, (src, tgt, *negatives)


def shard_files(prefix, pair, num_shards):
    """The shard names of one language pair: `<prefix>.<pair>.tfrecord-00000-of-00004`, ..."""
    return [f"{prefix}.{pair}.tfrecord-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


def _token_ids(tokenizer, texts):
    """Untruncated token ids (special tokens included) of `texts`, as Python lists."""
    return tokenizer.tokenize(tf.constant(texts), truncate=False).to_list()


def serialize_rows(rows, src_lang, tgt_lang, tokenizer=None):
    """The serialized `tf.train.Example`s of cleaned rows (with both sides' token ids when `tokenizer` is given)."""
    ids = [[None] * len(rows)] * 2
    if tokenizer is not None and rows:
        ids = [_token_ids(tokenizer, [row[side] for row in rows]) for side in (0, 1)]
    return [make_example(src, tgt, src_lang, tgt_lang, hard_negatives=negatives or None, src_ids=src_ids,
                         tgt_ids=tgt_ids)
            for (src, tgt, *negatives), src_ids, tgt_ids in zip(rows, *ids)]


def new_manifest(prefix, tokenizer=None):
    """A manifest without pairs yet (each writer adds `pair_entry`s under `"pairs"`)."""
    manifest = {"prefix": prefix, "pairs": {}}
    if tokenizer is not None:
        manifest["tokenizer"] = {"class": type(tokenizer).__name__, "fingerprint": tokenizer.fingerprint()}
    return manifest


def pair_entry(files, counts):
    """One language pair's manifest entry: its shards, examples and every drop count (`counts` is a Counter)."""
    return {"files": files, "examples": counts["examples"], **{reason: counts[reason] for reason in DROP_REASONS}}


def write_manifest(manifest, output_dir):
    """Writes `<output_dir>/<prefix>.manifest.json`; refuses a corpus in which no pair survived filtering."""
    if not any(p["examples"] for p in manifest["pairs"].values()):
        raise CorpusError("No pair survived filtering: every row was empty or over-long; nothing to train on.")
    path = os.path.join(output_dir, manifest["prefix"] + MANIFEST_SUFFIX)
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(manifest, indent=2))
    return path


def write_tfrecords(pair_sources, output_dir, prefix="corpus", num_shards=4, max_chars=1000, verbose=True,
                    tokenizer=None, drop_duplicates=False, manifest_fields=None):
    """Writes the rows of each `(src_lang, tgt_lang, rows)` source as shards.

    Rows are cleaned by `clean_row` (dropped and counted when a side is empty
    or longer than `max_chars` characters); with `drop_duplicates`, a row
    equal to an earlier one of its pair (after cleaning) is dropped and
    counted too. A pair may come from one source only. With `tokenizer`,
    each record also stores both sides' token ids (`src_ids`, `tgt_ids`) and
    the manifest the tokenizer's fingerprint, so training can skip
    tokenization (`make_dataset.pretokenized`).
    `manifest_fields` are recorded in the manifest beside the pairs (what a
    reader held out, for one). Returns the manifest dict (also written as JSON).
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1, got {num_shards}.")
    os.makedirs(output_dir, exist_ok=True)
    manifest = dict(new_manifest(prefix, tokenizer), **(manifest_fields or {}))
    for src_lang, tgt_lang, rows in pair_sources:
        pair = f"{src_lang}-{tgt_lang}"
        if pair in manifest["pairs"]:  # its shards would be overwritten by the second source
            raise CorpusError(f"Two sources of the pair {pair}: join them into one, or write each under its own "
                              "prefix.")
        files = shard_files(prefix, pair, num_shards)
        counts = collections.Counter()
        progress = keras.utils.Progbar(len(rows), unit_name="pair", verbose=1 if verbose else 0)
        writers = [tf.io.TFRecordWriter(os.path.join(output_dir, name)) for name in files]
        kept, seen = [], set()

        def flush():
            for record in serialize_rows(kept, src_lang, tgt_lang, tokenizer):
                writers[counts["examples"] % num_shards].write(record)
                counts["examples"] += 1
            kept.clear()

        try:
            for i, row in enumerate(rows):
                reason, row = clean_row(row, max_chars)
                if reason is None and drop_duplicates:
                    reason = "dropped_duplicate" if row in seen else None
                    seen.add(row)
                if reason is None:
                    kept.append(row)
                else:
                    counts[reason] += 1
                if len(kept) == _WRITE_CHUNK:
                    flush()
                if verbose and (i + 1) % 1000 == 0:
                    progress.update(i + 1)
            flush()
            progress.update(len(rows), finalize=True)
        finally:
            for writer in writers:
                writer.close()
        manifest["pairs"][pair] = pair_entry(files, counts)
        if verbose:
            print(
                f"{pair}: wrote {counts['examples']} pairs to {num_shards} shards; dropped "
                f"{counts['dropped_empty']} with an empty side, {counts['dropped_long']} over {max_chars} chars, "
                f"{counts['dropped_duplicate']} duplicates."
            )
    path = write_manifest(manifest, output_dir)
    if verbose:
        print(f"Manifest: {path}")
    return manifest
