"""oneDNN ops without a Python wrapper: the layer norm against NumPy, quantization against its formula, and where
they may be called."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import needs_onednn_ops
from tf_msemb.inference import onednn


def _numpy_layer_norm(x, gamma, beta, epsilon):
    x = x.astype(np.float64)
    mean, variance = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


@needs_onednn_ops
def test_layer_norm_equals_numpy():
    # Rows of small variance next to epsilon = 0.5, and gamma unlike beta: an epsilon left out, given as a
    # standard deviation, or gamma and beta swapped are each far off.
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(300, 24)) * rng.uniform(0.1, 3, size=(300, 1)) + 2).astype(np.float32)
    gamma, beta = rng.normal(size=24).astype(np.float32), rng.normal(size=24).astype(np.float32) + 3
    got = tf.function(onednn.layer_norm)(x, gamma, beta, 0.5).numpy()
    np.testing.assert_allclose(got, _numpy_layer_norm(x, gamma, beta, 0.5), atol=1e-5)


def test_eager_calls_name_the_op():
    with pytest.raises(RuntimeError, match="_MklLayerNorm is added to a traced graph"):
        onednn.layer_norm(tf.ones([2, 4]), tf.ones([4]), tf.zeros([4]), 1e-6)


@needs_onednn_ops
def test_quantize_rounds_min_first_exactly_in_a_graph_and_in_an_unlowered_branch():
    """`round((clip(x) - low) * 255 / (high - low))` wherever it runs. TensorFlow's plain `QuantizeV2`, which a
    function outside its graph rewrite (an unlowered branch) runs, is a step off for some of these values."""
    from tf_msemb.inference.control_flow import unlowered_cond

    rng = np.random.default_rng(0)
    x = (rng.normal(size=(16, 512)) * 3).astype(np.float32)
    low, high = -0.17, 6.3
    want = np.round((np.clip(x.astype(np.float64), low, high) - low) * 255 / (high - low))

    def quantized(x):
        return tf.cast(onednn.quantize(x, low, high), tf.int32)

    in_graph = tf.function(quantized)(x).numpy()
    in_branch = tf.function(lambda x: unlowered_cond(tf.size(x) > 0, lambda: quantized(x), lambda: quantized(-x)))(x)
    np.testing.assert_array_equal(in_graph, want)
    np.testing.assert_array_equal(in_branch.numpy(), want)
