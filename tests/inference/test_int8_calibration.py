"""Layer-by-layer int8 calibration: activation ranges, smoothing per layer, bfloat16 fallback against a budget."""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import needs_bfloat16
from conftest import needs_int8
from tf_msemb.cpus import this_cpu
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.inference.int8_calibration import BLOCKS
from tf_msemb.inference.int8_calibration import MATMULS
from tf_msemb.inference.int8_calibration import SMOOTHING_CANDIDATES
from tf_msemb.inference.int8_calibration import Int8Options
from tf_msemb.inference.int8_calibration import _mark_fallback
from tf_msemb.inference.int8_calibration import fallback_layer
from tf_msemb.inference.int8_calibration import describe_fallback
from tf_msemb.inference.int8_calibration import describe_outliers
from tf_msemb.inference.int8_calibration import mse_range
from tf_msemb.inference.packed import PackedEncoder
from tf_msemb.models.packed_backbone import PackedDense
from tf_msemb.models.packed_backbone import read_supported
from tf_msemb.inference.quantization import Int8Dense
from tf_msemb.inference.quantization import RangeObserver

DAMAGED = 2
# The dtype fallback units run in on this CPU: bfloat16 where oneDNN has bfloat16 kernels, else float32.
FALLBACK = Int8Options().for_cpu(this_cpu()).fallback_dtype


def _batches(seed, count, size):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        lengths = rng.integers(1, 30, size)
        batches.append(tf.RaggedTensor.from_row_lengths(tf.constant(rng.integers(1, 300, lengths.sum()), tf.int32),
                                                        lengths))
    return batches


@pytest.fixture(scope="module")
def deep_encoder():
    """A 4-layer encoder whose layer `DAMAGED` has one feed-forward channel 100 times larger than the rest (its
    output row 100 times smaller): that channel sets the GELU output's one int8 range, the others get few levels."""
    keras.utils.set_random_seed(3)
    encoder = ensure_built(SentenceEncoder(300, hidden_dim=32, num_layers=4, num_heads=4, intermediate_dim=64,
                                           max_sequence_length=32, dropout=0.0))
    layer = read_supported(encoder.backbone)[0]["layers"][DAMAGED]
    kernel, output_kernel = layer["intermediate"][0], layer["output"][0]
    kernel.assign(tf.tensor_scatter_nd_update(kernel, [[i, 5] for i in range(32)], kernel[:, 5] * 100))
    output_kernel.assign(tf.tensor_scatter_nd_update(output_kernel, [[5]], output_kernel[5:6] / 100))
    return encoder


# The damage stays damage only with the outlier channel in the int8 range: the fallback tests turn the split off.
WHOLE_RANGE = {"outlier_channels": 0}


def _int8(encoder, options):
    return PackedEncoder(encoder, "int8", calibration=_batches(0, 3, 32), held_out=_batches(1, 1, 32),
                         int8_options=options)


def _cosines(encoder, packed, batch):
    """Cosines of `packed`'s vectors of `batch` to the float32 encoder's."""
    want = tf.math.l2_normalize(PackedEncoder(encoder)(batch), -1)
    got = tf.math.l2_normalize(tf.function(packed)(batch), -1)
    return tf.reduce_sum(want * got, -1).numpy()


def _half_way(report):
    """A budget half way from a report's all-int8 held-out cosine to 1."""
    all_int8 = report["sentence_cosine"]["all_int8"]["mean"]
    return min(0.99999, all_int8 + 0.5 * (1 - all_int8))


def _assert_fallback_measured_and_better(encoder, packed):
    """The fallback raised the held-out cosine, and the exported encoder is the one the report measured."""
    cosine = packed.int8_report["sentence_cosine"]
    assert cosine["exported"]["mean"] > cosine["all_int8"]["mean"]
    assert _cosines(encoder, packed, _batches(1, 1, 32)[0]).mean() == pytest.approx(cosine["exported"]["mean"],
                                                                                    abs=1e-5)


def _fake_quant_error(values, low, high):
    """Mean squared error of TensorFlow's own 8-bit fake quantization of `values` on `[low, high]`."""
    x = tf.constant(values, tf.float32)
    return float(tf.reduce_mean((x - tf.quantization.fake_quant_with_min_max_args(x, low, high, num_bits=8)) ** 2))


def test_the_mse_range_clips_a_heavy_tail_and_keeps_a_uniform_range():
    uniform = np.linspace(0.0, 1.0, 10001)
    assert mse_range(uniform, 0.0, 1.0) == pytest.approx((0.0, 1.0))
    # Student's t with 2 degrees of freedom: a few far values would stretch 256 levels over nothing.
    tail = np.random.default_rng(0).standard_t(2, size=200_000)
    low, high = mse_range(tail, tail.min(), tail.max())
    assert tail.min() < low < 0.0 < high < tail.max()
    assert _fake_quant_error(tail, low, high) < 0.9 * _fake_quant_error(tail, tail.min(), tail.max())


def test_percentile_ranges_read_the_sampled_rows_times_the_smoothing_scale():
    observer = RangeObserver(lambda x, residual=None, training=False: x, sample_fraction=1.0)
    values = np.random.default_rng(0).normal(size=(4000, 3)).astype(np.float32)
    values[0, 0] = 50.0
    observer(tf.constant(values))
    scale = np.array([1.0, 2.0, 0.5])
    options = Int8Options(ranges="percentile", percentile=99.0)
    want = (np.percentile((values * scale).ravel(), 1.0), np.percentile((values * scale).ravel(), 99.0))
    np.testing.assert_allclose(options.input_range(observer, scale), want, rtol=1e-5)
    assert Int8Options().input_range(observer, scale) == pytest.approx(((values * scale).min(), 50.0))


def test_options_name_the_bad_value():
    with pytest.raises(ValueError, match="ranges 'max'"):
        Int8Options(ranges="max")
    with pytest.raises(ValueError, match="smoothing 1.5"):
        Int8Options(smoothing=1.5)
    with pytest.raises(ValueError, match="outlier_channels -1"):
        Int8Options(outlier_channels=-1)
    with pytest.raises(ValueError, match="gelu_range 'row'"):
        Int8Options(gelu_range="row")


@needs_bfloat16
def test_the_bfloat16_fallback_computes_the_float_layer_in_bfloat16():
    rng = np.random.default_rng(0)
    kernel, bias = rng.normal(size=(8, 6)).astype(np.float32), rng.normal(size=6).astype(np.float32)
    dense = PackedDense([tf.Variable(kernel)], [tf.Variable(bias)], tf.float32, activation="gelu")
    x = rng.normal(size=(5, 8)).astype(np.float32)
    got = fallback_layer([dense], "bfloat16")[0](tf.constant(x), residual=tf.ones([5, 6]))
    assert got.dtype == tf.float32
    want = 1.0 + tf.nn.gelu(x @ kernel + bias, approximate=False).numpy()
    np.testing.assert_allclose(got.numpy(), want, atol=0.05)
    assert not np.allclose(got.numpy(), want, atol=1e-5)  # it did round to bfloat16


@pytest.mark.slow
@needs_int8
def test_the_report_finds_the_damaged_layer_and_the_budget_puts_it_in_bfloat16(deep_encoder):
    plain = _int8(deep_encoder, Int8Options(**WHOLE_RANGE)).int8_report
    isolated = [layer["isolated_cosine"]["mean"] for layer in plain["layers"]]
    cumulative = [layer["cumulative_cosine"]["mean"] for layer in plain["layers"]]
    assert int(np.argmin(isolated)) == DAMAGED, isolated
    assert cumulative[DAMAGED] < cumulative[DAMAGED - 1] - 1e-4, cumulative
    assert plain["fallback_layers"] == [] and plain["sentence_cosine"]["exported"] == plain["sentence_cosine"][
        "all_int8"]

    budget = _half_way(plain)
    packed = _int8(deep_encoder, Int8Options(fallback_cosine=budget, **WHOLE_RANGE))
    report = packed.int8_report
    assert report["fallback_layers"][0] == DAMAGED
    assert [layer["precision"] for layer in report["layers"]].count(FALLBACK) == len(report["fallback_layers"])
    assert report["sentence_cosine"]["exported"]["mean"] >= budget
    # The exported encoder is the one measured: its vectors reach the reported cosine on the held-out batch.
    cosines = _cosines(deep_encoder, packed, _batches(1, 1, 32)[0])
    assert cosines.mean() == pytest.approx(report["sentence_cosine"]["exported"]["mean"], abs=1e-5)

    capped = _int8(deep_encoder, Int8Options(fallback_cosine=budget, max_fallback_layers=0, **WHOLE_RANGE)).int8_report
    assert capped["fallback_layers"] == []


@pytest.mark.slow
@needs_int8
def test_the_damaged_channel_stays_float32_and_its_layer_keeps_float32_quality(deep_encoder):
    whole = _int8(deep_encoder, Int8Options(**WHOLE_RANGE)).int8_report
    packed = _int8(deep_encoder, Int8Options())
    split = packed.int8_report
    # Only the damaged layer's GELU output has a channel far wider than the rest: channel 5, the one scaled.
    assert [layer["outlier_channels"] for layer in split["layers"]] == [
        [5] if index == DAMAGED else [] for index in range(4)]
    damaged, undamaged = (split["layers"][DAMAGED]["isolated_cosine"]["mean"],
                          whole["layers"][DAMAGED]["isolated_cosine"]["mean"])
    # Most of what the damaged layer lost is back: within a fifth of its loss on one shared range.
    assert 1 - damaged < 0.2 * (1 - undamaged), (damaged, undamaged)
    assert split["sentence_cosine"]["all_int8"]["mean"] > whole["sentence_cosine"]["all_int8"]["mean"]
    assert describe_outliers(split) == f"1 (layers {DAMAGED})" and describe_outliers(whole) == "none"
    # The exported encoder is the one measured.
    cosines = _cosines(deep_encoder, packed, _batches(1, 1, 32)[0])
    assert cosines.mean() == pytest.approx(split["sentence_cosine"]["exported"]["mean"], abs=1e-5)


@pytest.mark.slow
@needs_int8
def test_gelu_ranges_per_token_lose_less_and_are_what_is_exported(deep_encoder):
    # With the damaged channel in the int8 range, the tokens it is quiet in get levels of their own: the damaged
    # layer loses a fraction of what it loses on one range. Wrong code this fails: the option not reaching the
    # layers (the same cosines), the report not saying which range ran, an exported encoder other than the one
    # measured.
    whole = {gelu_range: _int8(deep_encoder, Int8Options(gelu_range=gelu_range, **WHOLE_RANGE)).int8_report
             for gelu_range in ("tensor", "token")}
    damaged = {name: 1 - report["layers"][DAMAGED]["isolated_cosine"]["mean"] for name, report in whole.items()}
    # With paired weights (CPUs without VNNI) the weights' own rounding is a floor under both (0.38 of it measured
    # on 7-bit weights).
    assert damaged["token"] < (0.3 if this_cpu().exact_int8 else 0.5) * damaged["tensor"], damaged
    tensor = _int8(deep_encoder, Int8Options()).int8_report
    packed = _int8(deep_encoder, Int8Options(gelu_range="token"))
    token = packed.int8_report
    assert (tensor["gelu_range"], token["gelu_range"]) == ("tensor", "token")
    for per_tensor, per_token in zip(tensor["layers"], token["layers"]):
        assert per_token["isolated_cosine"]["mean"] >= per_tensor["isolated_cosine"]["mean"]
    # With the outlier split and paired weights (CPUs without VNNI) the sentence means are equal to rounding:
    # -1.2e-5 under the AVX2 cap (every layer's isolated cosine still at least per-tensor's, above).
    gained = token["sentence_cosine"]["all_int8"]["mean"] - tensor["sentence_cosine"]["all_int8"]["mean"]
    assert (gained > 0 if this_cpu().exact_int8 else gained > -3e-5), (gained, token, tensor)
    cosines = _cosines(deep_encoder, packed, _batches(1, 1, 32)[0])
    assert cosines.mean() == pytest.approx(token["sentence_cosine"]["exported"]["mean"], abs=1e-5)


@pytest.mark.slow
@needs_int8
def test_smoothing_per_layer_keeps_the_best_candidate_of_each_layer(deep_encoder, caplog):
    fixed = _int8(deep_encoder, Int8Options(smoothing=0.5)).int8_report
    with caplog.at_level(logging.WARNING):
        chosen = _int8(deep_encoder, Int8Options(smoothing="per_layer")).int8_report
    # 20 candidate layers, each traced once on purpose: TensorFlow's retracing warning would only alarm a user.
    assert "retracing" not in caplog.text
    for fixed_layer, layer in zip(fixed["layers"], chosen["layers"]):
        assert layer["smoothing"] in SMOOTHING_CANDIDATES
        assert layer["isolated_cosine"]["mean"] >= fixed_layer["isolated_cosine"]["mean"] - 1e-6


@pytest.mark.slow
@needs_int8
def test_block_fallback_puts_only_the_damaged_feed_forward_in_bfloat16(deep_encoder):
    plain = _int8(deep_encoder, Int8Options(fallback_unit="block", **WHOLE_RANGE)).int8_report
    blocks = {(layer["layer"], block): entry["isolated_cosine"]["mean"]
              for layer in plain["layers"] for block, entry in layer["blocks"].items()}
    # The damaged channel is in the feed-forward: its block loses, the same layer's attention does not.
    assert min(blocks, key=blocks.get) == (DAMAGED, "feed_forward"), blocks
    assert blocks[DAMAGED, "attention"] > blocks[DAMAGED, "feed_forward"]
    assert plain["fallback_blocks"] == [] and plain["fallback_layers"] == []

    budget = _half_way(plain)
    packed = _int8(deep_encoder, Int8Options(fallback_cosine=budget, fallback_unit="block", max_fallback_layers=1,
                                             **WHOLE_RANGE))
    report = packed.int8_report
    assert report["fallback_blocks"] == [[DAMAGED, "feed_forward"]] and report["fallback_layers"] == [DAMAGED]
    damaged = report["layers"][DAMAGED]
    assert damaged["precision"] == f"{FALLBACK} feed-forward"
    assert damaged["blocks"]["feed_forward"]["precision"] == FALLBACK
    assert damaged["blocks"]["attention"]["precision"] == "int8"
    # The attention block kept its int8 matmuls and the feed-forward block runs the float weights in bfloat16.
    layer = packed.backbone.layers[DAMAGED]
    assert isinstance(layer["qkv"], Int8Dense) and isinstance(layer["attention_output"], Int8Dense)
    assert isinstance(layer["intermediate"], PackedDense) and layer["intermediate"].compute_dtype == FALLBACK
    assert isinstance(layer["output"], PackedDense)
    _assert_fallback_measured_and_better(deep_encoder, packed)


@pytest.mark.slow
@needs_int8
def test_matmul_fallback_puts_only_the_damaged_second_feed_forward_matmul_in_bfloat16(deep_encoder):
    plain = _int8(deep_encoder, Int8Options(fallback_unit="matmul", **WHOLE_RANGE)).int8_report
    gains = {(layer["layer"], name): entry["fallback_cosine"]["mean"] - layer["isolated_cosine"]["mean"]
             for layer in plain["layers"] for name, entry in layer["matmuls"].items()}
    # The damaged channel widens the GELU output, the second matmul's int8 input: bfloat16 there gains most.
    assert max(gains, key=gains.get) == (DAMAGED, "feed_forward_output"), gains
    assert gains[DAMAGED, "feed_forward_output"] > 10 * max(abs(gains[DAMAGED, "attention"]), 1e-6)
    assert plain["fallback_matmuls"] == [] and plain["fallback_layers"] == []

    budget = _half_way(plain)
    packed = _int8(deep_encoder, Int8Options(fallback_cosine=budget, fallback_unit="matmul", max_fallback_layers=1,
                                             **WHOLE_RANGE))
    report = packed.int8_report
    assert report["fallback_matmuls"] == [[DAMAGED, "feed_forward_output"]] and report["fallback_layers"] == [DAMAGED]
    damaged = report["layers"][DAMAGED]
    assert damaged["precision"] == f"{FALLBACK} feed-forward output"
    assert damaged["matmuls"]["attention"]["precision"] == "int8"
    assert describe_fallback(report) == f"matmuls: {DAMAGED} feed-forward output"
    # The first feed-forward matmul stays int8, writing the GELU output in bfloat16 for the second, which runs
    # the float weights in bfloat16; attention keeps its int8 matmuls.
    layer = packed.backbone.layers[DAMAGED]
    assert isinstance(layer["qkv"], Int8Dense) and isinstance(layer["attention_output"], Int8Dense)
    assert isinstance(layer["intermediate"], Int8Dense) and layer["intermediate"].output_range is None
    assert layer["intermediate"].output_dtype == FALLBACK
    assert isinstance(layer["output"], PackedDense) and layer["output"].compute_dtype == FALLBACK
    _assert_fallback_measured_and_better(deep_encoder, packed)


def test_an_unknown_fallback_unit_is_named():
    with pytest.raises(ValueError, match="fallback unit 'tensor'"):
        Int8Options(fallback_unit="tensor")


def test_a_layer_is_bfloat16_once_both_its_blocks_are():
    layer = {"precision": "int8", "blocks": {block: {"precision": "int8"} for block in BLOCKS}}
    _mark_fallback(layer, "attention", "bfloat16")
    assert layer["precision"] == "bfloat16 attention"
    _mark_fallback(layer, "feed_forward", "bfloat16")
    assert layer["precision"] == "bfloat16"
    assert describe_fallback({"fallback_blocks": [[3, "feed_forward"], [3, "attention"]], "fallback_layers": [3]}) \
        == "blocks: 3 feed-forward, 3 attention"
    assert describe_fallback({"fallback_layers": [4, 5]}) == "layers: 4, 5"


def test_a_layer_with_matmuls_in_bfloat16_names_them_and_keeps_its_first_feed_forward_matmul_int8():
    layer = {"precision": "int8", "matmuls": {name: {"precision": "int8"} for name in MATMULS}}
    _mark_fallback(layer, "feed_forward_output", "float32")
    assert layer["precision"] == "float32 feed-forward output"
    _mark_fallback(layer, "attention", "float32")
    assert layer["precision"] == "float32 attention, feed-forward output"
    assert describe_fallback({"fallback_matmuls": [[3, "feed_forward_output"]], "fallback_layers": [3]}) \
        == "matmuls: 3 feed-forward output"
