"""Adding a teacher's vector of every `src` sentence to TFRecord shards, and then its hard negatives.

With the vectors stored, distillation never runs the teacher (seed 001,
Sec. 3). The negatives of a source are the stored vectors of its nearest
other sources in the teacher's space (seed 004, Sec. 4.2, appends hard
negatives to each example following Guo et al. 2018); they are mined from
the stored vectors alone. Each finished shard is written under a temporary name and renamed,
so an interrupted run resumes at the first missing shard; a stamp of the
input shards and of every setting that changes the output (`SOURCE_STAMP`:
the teacher's name, tokenizer settings with its prompt, and weights; the
negatives' count, ceiling and search) keeps a rerun from reusing shards
written from another corpus, teacher or setting.
"""

import dataclasses
import hashlib
import json
import os
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from tf_msemb.data.hard_negatives import NO_NEGATIVES
from tf_msemb.data.hard_negatives import mine_hard_negatives
from tf_msemb.data.records import text_field
from tf_msemb.data.writing import MANIFEST_SUFFIX
from tf_msemb.files import write_atomically
from tf_msemb.provenance import portable_config
from tf_msemb.text_files import CorpusError


def encode_unique(embed, sentences, cache, batch_size):
    """Vectors of `sentences`, computing only those missing from `cache` (in batches of `batch_size` by length)."""
    missing = sorted({s for s in sentences if s not in cache}, key=len)
    for start in range(0, len(missing), batch_size):
        batch = missing[start : start + batch_size]
        vectors = embed(tf.constant(batch)).numpy()
        cache.update(zip(batch, vectors))
    return np.stack([cache[s] for s in sentences]) if sentences else np.zeros((0, 0), np.float32)


def with_teacher(serialized, vector):
    """The record `serialized` with its `teacher` field set to `vector`."""
    example = tf.train.Example.FromString(serialized)
    example.features.feature["teacher"].float_list.value[:] = vector.tolist()
    return example.SerializeToString(deterministic=True)


SOURCE_STAMP = "source.sha1"


def _input_digest(paths, settings):
    """SHA-1 of the input shards' bytes (in order) and a settings string."""
    digest = hashlib.sha1(settings.encode("utf-8"))
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def _claim_output(output_dir, names, stamp):
    """Stamps `output_dir` for this input; refuses a folder whose finished shards came from another one."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, SOURCE_STAMP)
    written = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            written = f.read().strip()
    if written != stamp and any(os.path.exists(os.path.join(output_dir, name)) for name in names):
        raise CorpusError(f"{output_dir} holds shards written from another input or settings ({SOURCE_STAMP} "
                          f"{'differs' if written else 'is missing'}); remove the folder or choose another output "
                          "directory.")

    def write(partial):
        with open(partial, "w", encoding="utf-8") as f:
            f.write(stamp + "\n")

    write_atomically(path, write)


def teacher_identity(teacher_name, tokenizer, encoder):
    """What the vectors depend on, as one string: the name, the tokenizer's settings (the prompt among them; files by
    base name) and a SHA-1 of the encoder's weights, so other weights behind the same name differ too."""
    weights = hashlib.sha1()
    for weight in encoder.weights:
        weights.update(keras.ops.convert_to_numpy(weight).tobytes())
    settings = json.dumps(portable_config(tokenizer.get_config()), sort_keys=True, default=str)
    return f"teacher {teacher_name} tokenizer {settings} weights {weights.hexdigest()}"


@dataclasses.dataclass(frozen=True)
class NeighbourSearch:
    """How `add_teacher_negatives` finds each source's nearest sources: `knn(queries, pool, k)` -> `(sims, ids)`,
    best first, over `[n, d]` and `[p, d]` unit vectors, asked for `candidates` (enough beyond the negatives'
    count for the source itself and its near-duplicates); `method` names the search. `candidates` and `method`
    are in the output folder's stamp."""

    knn: Callable
    candidates: int
    method: str = "exact"

    def __call__(self, queries, pool):
        return self.knn(queries, pool, self.candidates)

    def settings(self):
        return f"search {self.method} candidates {self.candidates}"


def _read_manifest(manifest_path):
    if not manifest_path.endswith(MANIFEST_SUFFIX) or not os.path.exists(manifest_path):
        raise CorpusError(f"Not a corpus manifest: {manifest_path}")
    with open(manifest_path, encoding="utf-8") as f:
        return json.load(f)


def add_teacher_vectors(manifest_path, tokenizer, encoder, teacher_name, output_dir, batch_size=128, verbose=True,
                        embed=None):
    """Copies a corpus to `output_dir` with a `teacher` field in every record.

    `embed`: `[b]` strings -> `[b, d]`, a faster path to what
    `encoder(tokenizer(texts))` computes (`inference.packed.packed_embedder`);
    None: that Keras forward. Returns the new manifest (same shards and
    counts, plus `"teacher": {"model", "dim"}`), written next to the shards.
    """
    manifest = _read_manifest(manifest_path)
    source_dir = os.path.dirname(manifest_path)
    names = [name for info in manifest["pairs"].values() for name in info["files"]]
    _claim_output(output_dir, names, _input_digest([os.path.join(source_dir, n) for n in names],
                                                   teacher_identity(teacher_name, tokenizer, encoder)))
    if embed is None:
        embed = tf.function(lambda texts: encoder(tokenizer(texts), training=False), reduce_retracing=True)
    total = sum(info["examples"] for info in manifest["pairs"].values())
    progress = keras.utils.Progbar(total, unit_name="sentence", verbose=1 if verbose else 0)
    cache = {}
    for info in manifest["pairs"].values():
        for name in info["files"]:
            source, target = os.path.join(source_dir, name), os.path.join(output_dir, name)
            records = list(tf.data.TFRecordDataset(source).as_numpy_iterator())
            if not os.path.exists(target):
                sentences = [text_field(tf.train.Example.FromString(r).features.feature) for r in records]
                vectors = encode_unique(embed, sentences, cache, batch_size)
                partial = target + ".partial"
                with tf.io.TFRecordWriter(partial) as writer:
                    for record, vector in zip(records, vectors):
                        writer.write(with_teacher(record, vector))
                os.replace(partial, target)
            progress.add(len(records))
    dim = int(next(iter(cache.values())).shape[0]) if cache else int(encoder.output_dim)
    manifest["teacher"] = {"model": teacher_name, "dim": dim}
    path = os.path.join(output_dir, os.path.basename(manifest_path))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def _examples(path):
    """The parsed `tf.train.Example`s of one shard, one at a time."""
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        yield tf.train.Example.FromString(record)


def add_teacher_negatives(manifest_path, output_dir, count, ceiling, search, verbose=True):
    """Copies a corpus with teacher vectors to `output_dir`, adding `teacher_negatives` to every record.

    The corpus' distinct sources (over all its language pairs) are searched
    among themselves by their stored teacher vectors; a source's negatives are
    the vectors of its `count` nearest other sources, skipping any whose cosine
    with it reaches `ceiling` (a near-duplicate, no negative). Records whose
    source has fewer are dropped and counted (`dropped_no_negatives`).

    Args:
        manifest_path: a manifest with `teacher` (`add_teacher_vectors`).
        output_dir: where the new shards and manifest go.
        count: negatives per record.
        ceiling: the near-duplicate cosine.
        search: a `NeighbourSearch`.

    Returns the new manifest, with `"teacher_negatives": {"count", "ceiling"}`.
    """
    manifest = _read_manifest(manifest_path)
    if "teacher" not in manifest:
        raise CorpusError(f"{manifest_path} has no teacher vectors; add them first (tools/precompute_teacher.py).")
    source_dir = os.path.dirname(manifest_path)
    names = [name for info in manifest["pairs"].values() for name in info["files"]]
    # Two streaming passes, one shard at a time: the distinct sources' vectors, then the extended records.
    # The first pass also stamps the input (its records' bytes and the settings).
    digest = hashlib.sha1(f"negatives {count} {ceiling} {search.settings()}".encode("utf-8"))
    vectors = {}
    for name in names:
        for record in tf.data.TFRecordDataset(os.path.join(source_dir, name)).as_numpy_iterator():
            digest.update(record)
            example = tf.train.Example.FromString(record)
            text = text_field(example.features.feature)
            if text not in vectors:
                vectors[text] = np.asarray(example.features.feature["teacher"].float_list.value, np.float32)
    sources = {text: i for i, text in enumerate(vectors)}
    raw = np.stack(list(vectors.values())) if vectors else np.zeros((0, manifest["teacher"]["dim"]), np.float32)
    del vectors
    pool = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
    stamp = digest.hexdigest()
    _claim_output(output_dir, names, stamp)
    # Saved chunks belong to this very input and settings: another corpus in the same folder starts afresh.
    digest = stamp[:16]
    negatives = mine_hard_negatives(pool, pool, np.arange(len(pool)), count, ceiling, lambda q: search(q, pool),
                                    os.path.join(output_dir, f"negatives-{digest}"), verbose=verbose)
    kept_sources = negatives[:, 0] != NO_NEGATIVES
    for pair, info in manifest["pairs"].items():
        kept_total = 0
        for name in info["files"]:
            source, target = os.path.join(source_dir, name), os.path.join(output_dir, name)
            if os.path.exists(target):
                kept_total += sum(1 for _ in tf.data.TFRecordDataset(target))
                continue
            partial = target + ".partial"
            with tf.io.TFRecordWriter(partial) as writer:
                for example in _examples(source):
                    i = sources[text_field(example.features.feature)]
                    if not kept_sources[i]:
                        continue
                    example.features.feature["teacher_negatives"].float_list.value[:] = raw[negatives[i]].ravel().tolist()
                    writer.write(example.SerializeToString(deterministic=True))
                    kept_total += 1
            os.replace(partial, target)
        info["dropped_no_negatives"] = info["examples"] - kept_total
        info["examples"] = kept_total
        if verbose:
            print(f"{pair}: {kept_total} records with {count} teacher negatives; {info['dropped_no_negatives']} "
                  f"dropped (fewer than {count} neighbours below the ceiling {ceiling})")
    manifest["teacher_negatives"] = {"count": count, "ceiling": ceiling}
    path = os.path.join(output_dir, os.path.basename(manifest_path))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    return manifest
