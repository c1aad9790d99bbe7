import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.records import check_shards
from tf_msemb.data.records import find_corrupt_shard
from tf_msemb.data.records import make_example
from tf_msemb.data.records import parse_examples
from tf_msemb.text_files import CorpusError
from tf_msemb.data.features import HardNegatives
from tf_msemb.data.features import TeacherVectors


def test_round_trip_with_optional_fields():
    records = tf.constant(
        [
            make_example("Hallo", "Hello", "de", "en", teacher=[0.5, -1.0], hard_negatives=["Hi", "Bye"]),
            make_example("Ça va ?", "How are you?", "fr", "en", teacher=[2.0, 3.0], hard_negatives=["a", "b"]),
        ]
    )
    parsed = parse_examples(records, [TeacherVectors(2), HardNegatives(2)])
    assert parsed["src"].numpy().tolist() == ["Hallo".encode(), "Ça va ?".encode()]
    assert parsed["tgt_lang"].numpy().tolist() == [b"en", b"en"]
    np.testing.assert_allclose(parsed["teacher"].numpy(), [[0.5, -1.0], [2.0, 3.0]])
    assert parsed["hard_negatives"].numpy().tolist() == [[b"Hi", b"Bye"], [b"a", b"b"]]


def test_optional_fields_are_ignored_unless_asked():
    parsed = parse_examples(tf.constant([make_example("a", "b", "x", "y", teacher=[1.0])]))
    assert set(parsed) == {"src", "tgt", "src_lang", "tgt_lang"}


def test_teacher_dimension_mismatch_fails():
    with pytest.raises(tf.errors.InvalidArgumentError):
        parse_examples(tf.constant([make_example("a", "b", "x", "y", teacher=[1.0, 2.0, 3.0])]), [TeacherVectors(2)])


def _write(path, examples):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for example in examples:
            writer.write(example)
    return str(path)


def test_shard_check_names_missing_fields_and_teacher_width(tmp_path):
    plain = _write(tmp_path / "plain.tfrecord", [make_example("a", "b", "en", "de")])
    wide = _write(tmp_path / "wide.tfrecord", [make_example("a", "b", "en", "de", teacher=[0.5] * 8)])
    check_shards([plain, wide])
    check_shards([wide], [TeacherVectors(8)])
    with pytest.raises(CorpusError, match=r"plain\.tfrecord lacks the field\(s\) teacher"):
        check_shards([wide, plain], [TeacherVectors(8)])
    with pytest.raises(CorpusError, match=r"wide\.tfrecord holds teacher vectors of 8 values .* teacher_dim=384"):
        check_shards([wide], [TeacherVectors(384)])
    no_tags = tf.train.Example(features=tf.train.Features(feature={
        "src": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a"]))})).SerializeToString()
    with pytest.raises(CorpusError, match=r"lacks the field\(s\) tgt, src_lang, tgt_lang"):
        check_shards([_write(tmp_path / "bare.tfrecord", [no_tags])])


def test_corrupt_shards_are_found_and_named(tmp_path):
    good = _write(tmp_path / "good.tfrecord", [make_example(f"s{i}", "t", "en", "de") for i in range(50)])
    data = bytearray(open(good, "rb").read())
    bad_tail = tmp_path / "bad_tail.tfrecord"
    bad_tail.write_bytes(bytes(data[: len(data) - 7]))
    bad_head = tmp_path / "bad_head.tfrecord"
    bad_head.write_bytes(bytes(data[:4]) + bytes([data[4] ^ 0xFF]) + bytes(data[5:]))
    check_shards([good, str(bad_tail)])  # the first record is fine; the damage is further in
    path, reason = find_corrupt_shard([good, str(bad_tail)])
    assert path == str(bad_tail) and reason.startswith("truncated record at ")
    assert find_corrupt_shard([good]) is None
    with pytest.raises(CorpusError, match=r"Corrupt TFRecord shard .*bad_head\.tfrecord: corrupted record at 0"):
        check_shards([good, str(bad_head)])
