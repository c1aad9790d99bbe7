import numpy as np
import pytest

from tf_msemb.losses.distillation import distillation_mse
from tf_msemb.losses.distillation import multilingual_distillation_loss


def test_by_hand():
    target = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    prediction = np.array([[0.0, 0.0], [0.0, 0.0]], np.float32)
    # rows: 1 and 4 -> mean 2.5
    assert float(distillation_mse(target, prediction)) == pytest.approx(2.5)


def test_matches_numpy_and_sums_both_sides():
    rng = np.random.default_rng(0)
    t, s, u = (rng.normal(size=(5, 7)).astype(np.float32) for _ in range(3))
    total, src, tgt = multilingual_distillation_loss(t, s, u)
    assert float(src) == pytest.approx(np.mean(np.sum((t - s) ** 2, axis=1)), rel=1e-5)
    assert float(tgt) == pytest.approx(np.mean(np.sum((t - u) ** 2, axis=1)), rel=1e-5)
    assert float(total) == pytest.approx(float(src) + float(tgt), rel=1e-6)


def test_no_gradient_into_the_target():
    import tensorflow as tf

    t = tf.Variable([[1.0, 2.0]])
    s = tf.Variable([[0.0, 0.0]])
    with tf.GradientTape() as tape:
        loss = distillation_mse(t, s)
    grad_t, grad_s = tape.gradient(loss, [t, s])
    assert grad_t is None or not np.any(grad_t.numpy())
    np.testing.assert_allclose(grad_s.numpy(), [[-2.0, -4.0]])
