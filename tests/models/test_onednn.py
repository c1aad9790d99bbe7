"""oneDNN ops without a Python wrapper: the layer norm against NumPy, and where it may be called."""

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models import onednn


def _numpy_layer_norm(x, gamma, beta, epsilon):
    x = x.astype(np.float64)
    mean, variance = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def test_layer_norm_equals_numpy():
    # Rows of small variance next to epsilon = 0.5, and gamma unlike beta: an epsilon left out, given as a
    # standard deviation, or gamma and beta swapped are each far off.
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(300, 24)) * rng.uniform(0.1, 3, size=(300, 1)) + 2).astype(np.float32)
    gamma, beta = rng.normal(size=24).astype(np.float32), rng.normal(size=24).astype(np.float32) + 3
    try:
        got = tf.function(onednn.layer_norm)(x, gamma, beta, 0.5).numpy()
    except tf.errors.OpError as error:
        pytest.skip(f"no oneDNN layer norm in this TensorFlow: {error.message.splitlines()[0]}")
    np.testing.assert_allclose(got, _numpy_layer_norm(x, gamma, beta, 0.5), atol=1e-5)


def test_eager_calls_name_the_op():
    with pytest.raises(RuntimeError, match="_MklLayerNorm is added to a traced graph"):
        onednn.layer_norm(tf.ones([2, 4]), tf.ones([4]), tf.zeros([4]), 1e-6)
