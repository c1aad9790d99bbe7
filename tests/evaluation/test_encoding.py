import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.evaluation.encoding import Memoized
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import resolve_export


def fake_model(texts):
    """Embeds a string as (its length, number of 'a's): order is checkable."""
    length = tf.cast(tf.strings.length(texts), tf.float32)
    a_count = tf.cast(tf.strings.length(tf.strings.regex_replace(texts, "[^a]", "")), tf.float32)
    return tf.stack([length, a_count], axis=1)


def test_length_sorted_batches_come_back_in_input_order():
    sentences = ["aaaa", "b", "aa a", "", "zzzzzzzzzz a", "ab"]
    out = encode(fake_model, sentences, batch_size=2, verbose=False)
    expected = np.array([[len(s), s.count("a")] for s in sentences], np.float32)
    np.testing.assert_array_equal(out, expected)


def test_memoized_embed_encodes_each_distinct_sentence_once_and_keeps_the_order():
    seen = []

    def embed(sentences):
        seen.extend(sentences)
        return encode(fake_model, sentences, verbose=False)

    memo = Memoized(embed)
    first = memo(["aa", "b", "aa"])
    second = memo(["b", "ccc a", "aa"])
    assert seen == ["aa", "b", "ccc a"]
    np.testing.assert_array_equal(first, [[2, 2], [1, 0], [2, 2]])
    np.testing.assert_array_equal(second, [[1, 0], [5, 1], [2, 2]])
    assert memo([]).shape[0] == 0


def test_resolve_export(tmp_path):
    final = tmp_path / "run" / "export" / "final"
    final.mkdir(parents=True)
    (final / "saved_model.pb").write_bytes(b"")
    assert resolve_export(str(tmp_path / "run")) == str(final)
    assert resolve_export(str(final)) == str(final)
    with pytest.raises(FileNotFoundError, match="No SavedModel"):
        resolve_export(str(tmp_path))
