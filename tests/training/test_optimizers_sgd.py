"""`make_optimizer(name="sgd")`: seed 004's SGD with its one learning-rate step (Sec. 4.2)."""

import keras
import pytest

from tf_msemb.training.optimizers import make_optimizer


def test_the_paper_schedule_steps_down_tenfold_at_33m_of_40m():
    optimizer = make_optimizer(total_steps=40_000_000, name="sgd", learning_rate=0.003, momentum=0.0)
    assert isinstance(optimizer, keras.optimizers.SGD) and optimizer.momentum == 0.0
    schedule = optimizer._learning_rate  # Keras keeps the schedule object here
    rates = {step: float(schedule(step)) for step in (0, 32_999_999, 33_000_001, 39_999_999)}
    assert rates == pytest.approx({0: 0.003, 32_999_999: 0.003, 33_000_001: 0.0003, 39_999_999: 0.0003})


def test_a_shorter_run_steps_at_the_same_fraction_and_sgd_moves_by_the_rate():
    optimizer = make_optimizer(total_steps=400, name="sgd", learning_rate=0.5, momentum=0.0, warmup_steps=100)
    weight = keras.Variable([1.0])
    optimizer.apply([keras.ops.ones((1,))], [weight])
    assert float(weight.numpy()[0]) == pytest.approx(0.5)  # no warm-up: the full rate at step 0
    schedule = optimizer._learning_rate
    assert [float(schedule(step)) for step in (329, 330, 331)] == pytest.approx([0.5, 0.5, 0.05])
