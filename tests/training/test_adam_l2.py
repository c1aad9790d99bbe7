import keras
import numpy as np
import pytest

from tf_msemb.training.adam_l2 import AdamL2
from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.training.schedules import WarmupDecay


def _numpy_adam_l2(w, gradients, lr, l2, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(gradients, start=1):
        g = g + l2 * w
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        alpha = lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        w = w - alpha * m / (np.sqrt(v) + epsilon)
    return w


def _run(optimizer, w0, gradients):
    variable = keras.Variable(w0, name="kernel")
    for g in gradients:
        optimizer.apply([keras.ops.convert_to_tensor(g)], [variable])
    return variable.numpy()


def test_the_penalty_joins_the_gradient_before_the_moments():
    rng = np.random.default_rng(0)
    w0 = np.array([2.0, -3.0, 0.5], np.float32)
    gradients = [rng.normal(scale=1e-3, size=3).astype(np.float32) for _ in range(4)]
    got = _run(AdamL2(l2=0.1, learning_rate=0.01), w0, gradients)
    np.testing.assert_allclose(got, _numpy_adam_l2(w0, gradients, 0.01, 0.1), rtol=1e-5, atol=1e-7)
    # Neither plain Adam nor AdamW's decoupled decay lands there.
    for other in (keras.optimizers.Adam(0.01), keras.optimizers.AdamW(0.01, weight_decay=0.1)):
        assert np.abs(_run(other, w0, gradients) - got).max() > 1e-3


def test_config_round_trip_and_decoupled_decay_refused():
    optimizer = AdamL2(l2=3e-5, learning_rate=0.2, epsilon=1e-6)
    assert AdamL2.from_config(optimizer.get_config()).get_config() == optimizer.get_config()
    with pytest.raises(ValueError, match="AdamL2 takes its coupled penalty as l2"):
        AdamL2(l2=1e-5, weight_decay=1e-5)


def test_factory_builds_adam_l2_with_a_constant_rate_after_warmup():
    optimizer = make_optimizer(total_steps=100, name="adam_l2", learning_rate=3e-4, weight_decay=1e-5,
                               warmup_steps=10, decay="constant")
    assert isinstance(optimizer, AdamL2) and optimizer.l2 == 1e-5 and not optimizer.weight_decay
    schedule = optimizer._learning_rate
    assert isinstance(schedule, WarmupDecay)
    assert [float(schedule(k)) for k in (4, 10, 50, 99)] == pytest.approx([1.5e-4, 3e-4, 3e-4, 3e-4])
