import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.training.fused_adam import KERAS_INTERNALS
from tf_msemb.training.fused_adam import FusedAdam
from tf_msemb.training.fused_adam import FusedAdamW
from tf_msemb.training.optimizers import make_optimizer

SHAPES = {"kernel": (7, 5), "bias": (5,), "embeddings": (11, 5)}


def _steps(optimizer, steps=6, strategy=None):
    """Variables after `steps` updates with gradients that change sign and size from step to step.

    Under `strategy`, each replica applies half of each gradient, which the optimizer sums.
    """
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        variables = [keras.Variable(np.random.default_rng(i).standard_normal(shape).astype(np.float32), name=name)
                     for i, (name, shape) in enumerate(SHAPES.items())]
        optimizer.build(variables)
    replicas = strategy.num_replicas_in_sync
    rng = np.random.default_rng(7)
    gradients = [[tf.constant(rng.standard_normal(v.shape).astype(np.float32) * (step + 1)) for v in variables]
                 for step in range(steps)]
    apply = tf.function(lambda grads: strategy.run(
        lambda grads: optimizer.apply([g / replicas for g in grads], variables), args=(grads,)))
    for grads in gradients:
        apply(grads)
    return {v.name: v.numpy() for v in variables}


@pytest.mark.parametrize("fused, keras_class, options", [
    (FusedAdamW, keras.optimizers.AdamW, {"weight_decay": 0.1}),
    (FusedAdam, keras.optimizers.Adam, {}),
])
def test_the_fused_update_equals_keras_update_to_float32_rounding(fused, keras_class, options):
    """A large rate and eps, so a wrong bias correction (step t for t + 1), moment or decay moves the weights
    by far more than rounding (1e-6) does; the bias is exempt from the decay, in both."""
    results = []
    for cls in (fused, keras_class):
        optimizer = cls(learning_rate=0.05, beta_1=0.8, beta_2=0.95, epsilon=0.01, **options)
        if options:
            optimizer.exclude_from_weight_decay(var_names=["bias"])
        results.append(_steps(optimizer))
    fused_values, keras_values = results
    start = _steps(keras.optimizers.SGD(0.0))
    for name in SHAPES:
        assert np.abs(keras_values[name] - start[name]).max() > 0.1
        np.testing.assert_allclose(fused_values[name], keras_values[name], rtol=1e-6, atol=1e-6)


def test_the_fused_update_runs_under_a_two_replica_strategy(two_device_strategy):
    strategy = two_device_strategy
    with strategy.scope():
        optimizer = FusedAdamW(learning_rate=0.05, weight_decay=0.1)
    fused = _steps(optimizer, steps=2, strategy=strategy)
    plain = _steps(keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1), steps=2)
    for name in SHAPES:
        np.testing.assert_allclose(fused[name], plain[name], rtol=1e-6, atol=1e-6)


def test_this_keras_has_what_the_fused_update_reads(caplog):
    optimizer = FusedAdamW(learning_rate=0.05)
    with caplog.at_level(logging.WARNING):
        optimizer.build([keras.Variable(np.ones((2, 3), np.float32))])
    assert optimizer._fused and not [r for r in caplog.records if r.levelno >= logging.WARNING]


def _rename_in_keras(monkeypatch, name):
    """Keras as a release that renamed Adam's private `name` would be: gone under that name, except to Keras' own
    Adam update (which would read it under its new name)."""
    adam = keras.optimizers.Adam
    build, update_step = adam.build, adam.update_step
    owner = next((cls for cls in adam.__mro__ if name in vars(cls)), None)
    if owner is not None:
        method = vars(owner)[name]
        monkeypatch.delattr(owner, name)

    def renamed_build(self, var_list):
        build(self, var_list)
        if owner is None:
            self.__dict__["renamed"] = self.__dict__.pop(name)

    def renamed_update_step(self, gradient, variable, learning_rate):
        self.__dict__[name] = method.__get__(self) if owner is not None else self.__dict__["renamed"]
        try:
            update_step(self, gradient, variable, learning_rate)
        finally:
            del self.__dict__[name]

    monkeypatch.setattr(adam, "build", renamed_build)
    monkeypatch.setattr(adam, "update_step", renamed_update_step)


@pytest.mark.parametrize("name", KERAS_INTERNALS)
def test_a_keras_without_an_internal_read_gets_keras_own_update_with_a_warning(monkeypatch, caplog, name):
    """Keras' own update, so bit for bit Keras' results (the fused kernel's differ by float32 rounding)."""
    options = dict(learning_rate=0.05, beta_1=0.8, beta_2=0.95, epsilon=0.01, weight_decay=0.1)
    stock = _steps(keras.optimizers.AdamW(**options))
    _rename_in_keras(monkeypatch, name)
    with caplog.at_level(logging.WARNING):
        fallback = _steps(FusedAdamW(**options))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and name in warnings[0] and "Keras' own Adam" in warnings[0], warnings
    for variable in SHAPES:
        np.testing.assert_array_equal(fallback[variable], stock[variable])


def test_the_factory_fuses_adam_and_adamw_unless_told_not_to():
    assert type(make_optimizer(100, name="adamw")) is FusedAdamW
    assert type(make_optimizer(100, name="adam")) is FusedAdam
    assert type(make_optimizer(100, name="adamw", fused=False)) is keras.optimizers.AdamW
    assert type(make_optimizer(100, name="adam", fused=False)) is keras.optimizers.Adam


def test_config_round_trip():
    optimizer = FusedAdamW(learning_rate=0.01, weight_decay=0.02, beta_2=0.98)
    restored = FusedAdamW.from_config(optimizer.get_config())
    assert restored.weight_decay == 0.02 and restored.beta_2 == 0.98 and restored.name == "fused_adamw"
