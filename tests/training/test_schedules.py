import math

import pytest

from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.training.schedules import WarmupDecay


def test_linear_warmup_then_linear_decay():
    s = WarmupDecay(1.0, warmup_steps=4, total_steps=14, decay="linear")
    assert [round(float(s(k)), 4) for k in (0, 1, 3, 4, 9, 14, 20)] == [0.25, 0.5, 1.0, 1.0, 0.5, 0.0, 0.0]


def test_cosine_decay_with_floor():
    s = WarmupDecay(2.0, warmup_steps=0, total_steps=10, decay="cosine", end_fraction=0.1)
    assert float(s(0)) == pytest.approx(2.0)
    assert float(s(5)) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2))))
    assert float(s(10)) == pytest.approx(0.2)


def test_constant_and_config():
    s = WarmupDecay(0.5, 2, 10, decay="constant")
    assert float(s(9)) == pytest.approx(0.5)
    assert WarmupDecay(**s.get_config()).get_config() == s.get_config()
    with pytest.raises(ValueError, match="Unknown decay"):
        WarmupDecay(1.0, 1, 2, decay="step")


def test_adamw_excludes_biases_and_norms_from_decay():
    import keras

    optimizer = make_optimizer(total_steps=10, learning_rate=0.1, weight_decay=0.5)
    kernel = keras.Variable([[1.0]], name="kernel")
    bias = keras.Variable([1.0], name="bias")
    optimizer.apply([keras.ops.zeros((1, 1)), keras.ops.zeros((1,))], [kernel, bias])
    assert float(bias.numpy()[0]) == 1.0
    assert float(kernel.numpy()[0, 0]) < 1.0
    with pytest.raises(ValueError, match="Unknown optimizer"):
        make_optimizer(total_steps=10, name="rmsprop")


def test_warmup_as_a_share_of_the_run():
    """Seed 000 warms up 54K of 105K steps: a 600-step run warms up 309 steps and peaks there."""
    optimizer = make_optimizer(total_steps=600, name="lars", learning_rate=0.02, warmup_fraction=54 / 105,
                               decay="cosine")
    schedule = optimizer.learning_rate if callable(optimizer.learning_rate) else optimizer._learning_rate
    assert schedule.warmup_steps == 309
    with pytest.raises(ValueError, match="warmup_fraction"):
        make_optimizer(total_steps=600, warmup_fraction=54)
