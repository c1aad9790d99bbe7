"""Adding a teacher's vector of every `src` sentence to TFRecord shards.

With the vectors stored, distillation never runs the teacher (seed 001,
Sec. 3). Each finished shard is written under a temporary name and renamed,
so an interrupted run resumes at the first missing shard.
"""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from tf_msemb.text_files import CorpusError
from tf_msemb.data.writing import MANIFEST_SUFFIX


def _encode_unique(embed, sentences, cache, batch_size):
    """Vectors of `sentences`, computing only those missing from `cache`."""
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


def add_teacher_vectors(manifest_path, tokenizer, encoder, teacher_name, output_dir, batch_size=128, verbose=True):
    """Copies a corpus to `output_dir` with a `teacher` field in every record.

    Returns the new manifest (same shards and counts, plus
    `"teacher": {"model", "dim"}`), written next to the shards.
    """
    if not manifest_path.endswith(MANIFEST_SUFFIX) or not os.path.exists(manifest_path):
        raise CorpusError(f"Not a corpus manifest: {manifest_path}")
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    source_dir = os.path.dirname(manifest_path)
    os.makedirs(output_dir, exist_ok=True)
    embed = tf.function(lambda texts: encoder(tokenizer(texts), training=False), reduce_retracing=True)
    total = sum(info["examples"] for info in manifest["pairs"].values())
    progress = keras.utils.Progbar(total, unit_name="sentence", verbose=1 if verbose else 0)
    cache = {}
    for info in manifest["pairs"].values():
        for name in info["files"]:
            source, target = os.path.join(source_dir, name), os.path.join(output_dir, name)
            records = list(tf.data.TFRecordDataset(source).as_numpy_iterator())
            if not os.path.exists(target):
                sentences = [
                    tf.train.Example.FromString(r).features.feature["src"].bytes_list.value[0].decode("utf-8")
                    for r in records
                ]
                vectors = _encode_unique(embed, sentences, cache, batch_size)
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
