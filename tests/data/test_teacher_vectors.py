import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.records import parse_examples
from tf_msemb.data.teacher_vectors import NeighbourSearch
from tf_msemb.data.teacher_vectors import add_teacher_negatives
from tf_msemb.data.teacher_vectors import add_teacher_vectors
from tf_msemb.text_files import CorpusError
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.data.features import TeacherNegatives
from tf_msemb.data.features import TeacherVectors


@pytest.fixture(scope="module")
def tiny_teacher(tokenizer):
    keras.utils.set_random_seed(11)
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

    # Another teacher (or corpus) never reuses these shards: another name, prompt, or weights behind the same name.
    other_prompt = type(tokenizer).from_config({**tokenizer.get_config(), "prompt": "query: "})
    other_weights = SentenceEncoder.from_config(encoder.get_config())
    other_weights(tokenizer(tf.constant(["warm-up"])))
    other_weights.set_weights([w + 0.01 for w in encoder.get_weights()])
    for teacher in ((tokenizer, encoder, "other"), (other_prompt, encoder, "tiny"), (tokenizer, other_weights, "tiny")):
        with pytest.raises(CorpusError, match="holds shards written from another input or settings \\(source.sha1 "
                                              "differs"):
            add_teacher_vectors(quickstart_records, *teacher, str(out), verbose=False)


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


def _exact_search(k):
    def knn(queries, pool, k):
        sims = queries @ pool.T
        ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(sims, ids, axis=1), ids
    return NeighbourSearch(knn, k, "numpy")


def test_teacher_negatives_are_the_stored_vectors_of_the_nearest_other_sources(tiny_teacher, quickstart_records,
                                                                                tmp_path):
    tokenizer, encoder = tiny_teacher
    with_vectors = add_teacher_vectors(quickstart_records, tokenizer, encoder, "tiny", str(tmp_path / "t"),
                                       verbose=False)
    vectors = {}
    for info in with_vectors["pairs"].values():
        for name in info["files"]:
            records = tf.constant(list(tf.data.TFRecordDataset(str(tmp_path / "t" / name)).as_numpy_iterator()))
            parsed = parse_examples(records, [TeacherVectors(8)])
            vectors.update(zip(parsed["src"].numpy(), parsed["teacher"].numpy()))
    texts = list(vectors)
    raw = np.stack([vectors[t] for t in texts])
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    cosines = unit @ unit.T
    others = np.where(np.eye(len(texts), dtype=bool), -np.inf, cosines)
    # A ceiling the nearest other source of a fifth of the sources reaches (near-duplicates to skip), halfway
    # between two cosines so that rounding cannot put one on either side.
    nearest = np.unique(others.max(axis=1))  # sorted, each pair of mutual nearest sources once
    ceiling = float(nearest[int(0.8 * len(nearest)) - 1] + nearest[int(0.8 * len(nearest))]) / 2
    candidates = 6
    expected, dropped = {}, set()
    for i, text in enumerate(texts):
        # Of the 6 nearest (the source itself among them), neither the source nor a near-duplicate.
        order = [j for j in np.argsort(-cosines[i], kind="stable")[:candidates] if j != i and cosines[i, j] < ceiling]
        if len(order) >= 2:
            expected[text] = raw[order[:2]]
        else:
            dropped.add(text)

    out = tmp_path / "negatives"
    manifest = add_teacher_negatives(str(tmp_path / "t" / "qs.manifest.json"), str(out), 2, ceiling,
                                     _exact_search(candidates), verbose=False)
    assert manifest["teacher_negatives"] == {"count": 2, "ceiling": ceiling}
    assert json.loads((out / "qs.manifest.json").read_text()) == manifest
    seen = 0
    for pair, info in manifest["pairs"].items():
        rows = 0
        for name in info["files"]:
            records = tf.constant(list(tf.data.TFRecordDataset(str(out / name)).as_numpy_iterator()))
            parsed = parse_examples(records, [TeacherVectors(8), TeacherNegatives(2, 8)])
            for text, teacher, negatives in zip(parsed["src"].numpy(), parsed["teacher"].numpy(),
                                                parsed["teacher_negatives"].numpy()):
                np.testing.assert_array_equal(teacher, vectors[text])
                np.testing.assert_allclose(negatives.reshape(2, 8), expected[text], rtol=1e-6)
                rows += 1
        assert rows == info["examples"]
        assert info["dropped_no_negatives"] == with_vectors["pairs"][pair]["examples"] - rows
        seen += rows
    assert seen > 0 and any(info["dropped_no_negatives"] for info in manifest["pairs"].values()) == bool(dropped)

    batch = next(iter(make_dataset([str(out / "qs.manifest.json")], tokenizer, 4, max_tokens=48,
                                   features=[TeacherVectors(8), TeacherNegatives(2, 8)])))
    assert batch["teacher_negatives"].shape == (4, 2, 8)


def test_teacher_negatives_need_teacher_vectors(quickstart_records, tmp_path):
    with pytest.raises(CorpusError, match="has no teacher vectors"):
        add_teacher_negatives(quickstart_records, str(tmp_path), 2, 0.95, _exact_search(4))
