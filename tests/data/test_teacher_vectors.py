import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.records import parse_examples
from tf_msemb.data.teacher_vectors import add_teacher_vectors
from tf_msemb.text_files import CorpusError
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.data.features import TeacherVectors


@pytest.fixture(scope="module")
def tiny_teacher(tokenizer):
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=8, num_layers=1, num_heads=2,
                              intermediate_dim=16, max_sequence_length=tokenizer.max_length)
    encoder(tokenizer(tf.constant(["warm-up"])))
    return tokenizer, encoder


def test_vectors_are_the_teachers_and_the_run_resumes(tiny_teacher, quickstart_records, tmp_path):
    tokenizer, encoder = tiny_teacher
    out = tmp_path / "with_teacher"
    manifest = add_teacher_vectors(quickstart_records, tokenizer, encoder, "tiny", str(out), verbose=False)
    assert manifest["teacher"] == {"model": "tiny", "dim": 8}
    assert json.loads((out / "qs.manifest.json").read_text()) == manifest

    shard = out / manifest["pairs"]["en-de"]["files"][0]
    records = tf.constant(list(tf.data.TFRecordDataset(str(shard)).as_numpy_iterator()))
    parsed = parse_examples(records, [TeacherVectors(8)])
    expected = encoder(tokenizer(parsed["src"])).numpy()
    np.testing.assert_allclose(parsed["teacher"].numpy(), expected, atol=1e-5)

    kept = out / manifest["pairs"]["en-fr"]["files"][0]
    kept_mtime = os.path.getmtime(kept)
    os.remove(shard)
    add_teacher_vectors(quickstart_records, tokenizer, encoder, "tiny", str(out), verbose=False)
    assert shard.exists() and os.path.getmtime(kept) == kept_mtime
    assert not any(name.endswith(".partial") for name in os.listdir(out))

    batch = next(iter(make_dataset([str(out / "qs.manifest.json")], tokenizer, 4, max_tokens=48, features=[TeacherVectors(8)])))
    assert batch["teacher"].shape == (4, 8)


def test_not_a_manifest(tiny_teacher, tmp_path):
    with pytest.raises(CorpusError, match="Not a corpus manifest"):
        add_teacher_vectors(str(tmp_path / "x.tfrecord"), *tiny_teacher, "tiny", str(tmp_path / "o"))


class CountingEncoder(tf.keras.layers.Layer):
    """The teacher, counting the sentences it encodes (in a variable, so calls inside a tf.function count)."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.encoded = tf.Variable(0, dtype=tf.int64, trainable=False)

    def call(self, inputs, training=False):
        self.encoded.assign_add(tf.cast(tf.shape(inputs["token_ids"])[0], tf.int64))
        return self.encoder(inputs, training=training)


def test_each_distinct_source_sentence_is_encoded_once_and_its_vector_reused(tiny_teacher, quickstart_records,
                                                                             tmp_path):
    """The quickstart corpus pairs the same English sentences with de, fr and es: three records, one encoding."""
    tokenizer, encoder = tiny_teacher
    counting = CountingEncoder(encoder)
    manifest = add_teacher_vectors(quickstart_records, tokenizer, counting, "tiny", str(tmp_path), batch_size=7,
                                   verbose=False)
    vectors = {}
    for info in manifest["pairs"].values():
        for name in info["files"]:
            records = tf.constant(list(tf.data.TFRecordDataset(str(tmp_path / name)).as_numpy_iterator()))
            parsed = parse_examples(records, [TeacherVectors(8)])
            for sentence, vector in zip(parsed["src"].numpy(), parsed["teacher"].numpy()):
                vectors.setdefault(sentence, []).append(vector)
    records = sum(len(found) for found in vectors.values())
    assert records == sum(info["examples"] for info in manifest["pairs"].values()) > 2 * len(vectors)
    assert int(counting.encoded.numpy()) == len(vectors)
    for found in vectors.values():
        np.testing.assert_array_equal(np.stack(found), np.broadcast_to(found[0], (len(found), 8)))
