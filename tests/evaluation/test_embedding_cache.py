import json

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.evaluation.embedding_cache import cached_embeddings


class CountingModel:
    """Embeds `... <n>` as a unit vector of angle n degrees; counts and can fail after some calls."""

    def __init__(self, fail_after=None):
        self.sentences, self.calls, self.fail_after = 0, 0, fail_after

    def __call__(self, texts):
        if self.fail_after is not None and self.calls == self.fail_after:
            raise KeyboardInterrupt("stopped")
        self.calls += 1
        self.sentences += int(texts.shape[0])
        angle = tf.strings.to_number(tf.strings.split(texts).to_tensor()[:, -1]) * np.pi / 180
        return tf.stack([tf.cos(angle), tf.sin(angle)], axis=1)


SENTENCES = [f"line {n}" for n in range(23)]


def test_cache_equals_direct_encoding_in_float16(tmp_path):
    stored = cached_embeddings(CountingModel(), SENTENCES, str(tmp_path / "c.npy"), chunk_size=5, batch_size=2,
                               verbose=False)
    assert stored.dtype == np.float16 and stored.shape == (23, 2)
    expected = np.stack([np.cos(np.radians(np.arange(23))), np.sin(np.radians(np.arange(23)))], axis=1)
    np.testing.assert_allclose(stored, expected, atol=1e-3)


def test_an_interrupted_run_resumes_after_the_last_finished_chunk(tmp_path):
    path = str(tmp_path / "c.npy")
    # Chunks of 5 sentences in batches of 5: one call per chunk; the third chunk is interrupted.
    with pytest.raises(KeyboardInterrupt):
        cached_embeddings(CountingModel(fail_after=2), SENTENCES, path, "float32", chunk_size=5, batch_size=5,
                          verbose=False)
    assert json.loads(open(path + ".json").read())["done"] == 10
    resumed = CountingModel()
    stored = cached_embeddings(resumed, SENTENCES, path, "float32", chunk_size=5, batch_size=5, verbose=False)
    assert resumed.sentences == 13
    fresh = cached_embeddings(CountingModel(), SENTENCES, str(tmp_path / "fresh.npy"), "float32", chunk_size=5,
                              verbose=False)
    np.testing.assert_array_equal(stored, fresh)
    again = CountingModel()
    cached_embeddings(again, SENTENCES, path, "float32", chunk_size=5, verbose=False)
    assert again.sentences == 0


@pytest.mark.parametrize("change", ["sentences", "model", "dtype"])
def test_a_cache_of_other_sentences_model_or_dtype_is_not_reused(tmp_path, change):
    path = str(tmp_path / "c.npy")
    cached_embeddings(CountingModel(), SENTENCES, path, "float32", model_id="a", verbose=False)
    other = {"sentences": (SENTENCES[::-1], "a", "float32"), "model": (SENTENCES, "b", "float32"),
             "dtype": (SENTENCES, "a", "float16")}[change]
    model = CountingModel()
    stored = cached_embeddings(model, other[0], path, other[2], model_id=other[1], verbose=False)
    assert model.sentences == 23
    assert stored.dtype == np.dtype(other[2])
    np.testing.assert_allclose(stored[0], [np.cos(np.radians(int(other[0][0].split()[-1]))),
                                           np.sin(np.radians(int(other[0][0].split()[-1])))], atol=1e-3)


def test_empty_input_and_bad_dtype(tmp_path):
    with pytest.raises(ValueError, match="No sentences"):
        cached_embeddings(CountingModel(), [], str(tmp_path / "e.npy"), verbose=False)
    with pytest.raises(ValueError, match="Unknown dtype"):
        cached_embeddings(CountingModel(), SENTENCES, str(tmp_path / "e.npy"), dtype="int8", verbose=False)
