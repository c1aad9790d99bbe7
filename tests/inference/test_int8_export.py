"""The int8 export path's text: held-out lines, stress inputs built from the calibration text, the shared flags."""

import types

import pytest
import tensorflow as tf

from tf_msemb.inference.int8_export import calibration_batches
from tf_msemb.inference.int8_export import options_from_flags
from tf_msemb.inference.int8_export import stress_text


class _Words:
    """A tokenizer stand-in: one id per word, at most `max_length`."""

    max_length = 6

    def tokenize(self, texts):
        words = tf.strings.split(texts)
        return tf.strings.to_hash_bucket_fast(words, 1000)[:, :self.max_length]


def test_stress_text_repeats_the_most_frequent_words_and_joins_sentences_to_the_length():
    sentences = ["a dog runs", "a cat runs", "the dog sleeps", "one more line here"]
    texts = stress_text(sentences, 2, 5)
    # a, dog and runs are each seen twice: the first two seen are kept.
    assert texts == ["a a a a a", "dog dog dog dog dog", "a dog runs a cat runs"]


def test_the_last_eighth_is_held_out_and_the_stress_inputs_calibrate(tmp_path):
    path = tmp_path / "calibration.txt"
    path.write_text("".join(f"word{i} shared text\n\n" for i in range(16)), encoding="utf-8")
    calibration, held_out = calibration_batches(_Words(), str(path), 16, stress_inputs=2, batch_size=8)
    rows = [ids.nrows().numpy() for ids in calibration]
    assert rows == [8, 6, 3] and [ids.nrows().numpy() for ids in held_out] == [2]
    stress = calibration[-1]
    assert stress.row_lengths().numpy().tolist() == [6, 6, 6]  # every stress input as long as the tokenizer allows
    plain, _ = calibration_batches(_Words(), str(path), 16, batch_size=8)
    assert [ids.nrows().numpy() for ids in plain] == [8, 6]


def test_a_calibration_file_without_text_names_the_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"int8 calibration_file {path} has no non-empty line"):
        calibration_batches(_Words(), str(path), 10)


def test_the_flags_become_options_and_a_bad_alpha_names_the_flag():
    values = types.SimpleNamespace(int8_smoothing="per_layer", int8_ranges="mse", int8_percentile=99.9,
                                   int8_fallback_cosine=0.998, int8_max_fallback_layers=2, int8_attention="float32",
                                   int8_stress_inputs=0, int8_fallback_unit="block", int8_outlier_channels=2,
                                   int8_gelu_range="token", int8_target="avx2")
    options = options_from_flags(values)
    assert (options.smoothing, options.ranges, options.fallback_cosine, options.max_fallback_layers,
            options.attention, options.stress_inputs, options.fallback_unit, options.outlier_channels,
            options.gelu_range, options.target) == ("per_layer", "mse", 0.998, 2, "float32", 0, "block", 2, "token",
                                                    "avx2")
    # auto: left to the CPU (`Int8Options.for_cpu`).
    assert options_from_flags(types.SimpleNamespace(**{**vars(values), "int8_attention": "auto"})).attention is None
    assert options_from_flags(types.SimpleNamespace(**{**vars(values), "int8_smoothing": "0.6"})).smoothing == 0.6
    with pytest.raises(ValueError, match="--int8_smoothing='strong'"):
        options_from_flags(types.SimpleNamespace(**{**vars(values), "int8_smoothing": "strong"}))
