"""The input-feature contract: a new batch field is one class, and each feature checks its own records."""

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data import features as F
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.records import make_example
from tf_msemb.data.records import record_problem


class SourceLength(F.InputFeature):
    """A field no module knows about: the number of characters of `src`, from a record field of its own."""

    def record_spec(self):
        return {"src_chars": tf.io.FixedLenFeature([], tf.int64)}

    def check_record(self, fields):
        return None if fields["src_chars"].int64_list.value[0] >= 0 else "has a negative src_chars"

    def parse(self, records, tokenizer):
        return {"src_chars": records["src_chars"]}

    def padding(self, tokenizer):
        return {"src_chars": tf.constant(-1, tf.int64)}


def _with_length(src, tgt):
    example = tf.train.Example.FromString(make_example(src, tgt, "en", "de"))
    example.features.feature["src_chars"].int64_list.value.append(len(src))
    return example.SerializeToString()


def test_a_new_field_is_one_class(tokenizer, tmp_path):
    path = str(tmp_path / "lengths.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(6):
            writer.write(_with_length("a" * (i + 1), f"target {i}"))
    batch = next(iter(make_dataset(path, tokenizer, batch_size=6, max_tokens=48, shuffle_buffer=0, repeat=False,
                                   features=[SourceLength(), F.RawText()])))
    lengths = [len(text) for text in batch["src_text"].numpy()]
    np.testing.assert_array_equal(batch["src_chars"].numpy(), lengths)
    assert lengths == [1, 2, 3, 4, 5, 6]


def test_records_are_checked_against_every_declared_feature():
    plain = make_example("a", "b", "en", "de", teacher=[0.5, 0.5])
    assert record_problem(plain) is None
    assert record_problem(plain, [F.TeacherVectors(2)]) is None
    assert record_problem(plain, [F.TeacherVectors(2), SourceLength(), F.HardNegatives(2)]) == \
        "lacks the field(s) src_chars, hard_negatives"
    assert "teacher_dim=3" in record_problem(plain, [F.TeacherVectors(3)])
    assert record_problem(b"not a record") == "is not a serialized tf.train.Example"


def test_teacher_tokens_use_the_teachers_own_tokenizer(tokenizer):
    class Shifted:
        """A stand-in teacher tokenizer whose ids differ from the student's."""

        pad_id = 7

        def tokenize(self, texts):
            return tokenizer.tokenize(texts) + 100

    records = {"src": tf.constant(["Ein Hund.", "Zwei Katzen schlafen."])}
    fields = F.TeacherTokens(Shifted()).parse(records, tokenizer)["teacher_src"]
    np.testing.assert_array_equal(fields["token_ids"].flat_values, tokenizer.tokenize(records["src"]).flat_values + 100)
    assert F.TeacherTokens(Shifted()).padding(tokenizer)["teacher_src"]["token_ids"].numpy() == 7


def test_nli_batches_need_a_path():
    with pytest.raises(ValueError, match="nli_path"):
        F.NliBatch("", 8)
