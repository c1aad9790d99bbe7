import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.records import make_example
from tf_msemb.data.records import parse_examples


def test_round_trip_with_optional_fields():
    records = tf.constant(
        [
            make_example("Hallo", "Hello", "de", "en", teacher=[0.5, -1.0], hard_negatives=["Hi", "Bye"]),
            make_example("Ça va ?", "How are you?", "fr", "en", teacher=[2.0, 3.0], hard_negatives=["a", "b"]),
        ]
    )
    parsed = parse_examples(records, teacher_dim=2, num_hard_negatives=2)
    assert parsed["src"].numpy().tolist() == ["Hallo".encode(), "Ça va ?".encode()]
    assert parsed["tgt_lang"].numpy().tolist() == [b"en", b"en"]
    np.testing.assert_allclose(parsed["teacher"].numpy(), [[0.5, -1.0], [2.0, 3.0]])
    assert parsed["hard_negatives"].numpy().tolist() == [[b"Hi", b"Bye"], [b"a", b"b"]]


def test_optional_fields_are_ignored_unless_asked():
    parsed = parse_examples(tf.constant([make_example("a", "b", "x", "y", teacher=[1.0])]))
    assert set(parsed) == {"src", "tgt", "src_lang", "tgt_lang"}


def test_teacher_dimension_mismatch_fails():
    with pytest.raises(tf.errors.InvalidArgumentError):
        parse_examples(tf.constant([make_example("a", "b", "x", "y", teacher=[1.0, 2.0, 3.0])]), teacher_dim=2)
