import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.training.lars import LARS


def numpy_lars(w, grads, lr, momentum, wd, eta, adapt, nesterov=False):
    """Reference implementation, one variable, several steps."""
    w, v = w.astype(np.float64).copy(), np.zeros_like(w, dtype=np.float64)
    for g in grads:
        g = g.astype(np.float64)
        step_lr = lr
        if adapt:
            g = g + wd * w
            w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
            step_lr = lr * (eta * w_norm / g_norm if w_norm > 0 and g_norm > 0 else 1.0)
        v = momentum * v + step_lr * g
        w = w - (momentum * v + step_lr * g if nesterov else v)
    return w


@pytest.mark.parametrize("nesterov", [False, True])
def test_matches_numpy_and_excludes_biases(nesterov):
    rng = np.random.default_rng(0)
    kernel0, bias0 = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)
    grads = [(rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)) for _ in range(3)]
    layer = keras.layers.Dense(4, name="dense")
    layer.build((None, 3))
    layer.kernel.assign(kernel0)
    layer.bias.assign(bias0)
    optimizer = LARS(learning_rate=0.5, momentum=0.9, weight_decay_rate=0.01, eta=0.02, nesterov=nesterov)
    for gk, gb in grads:
        optimizer.apply([gk, gb], [layer.kernel, layer.bias])
    hyper = dict(lr=0.5, momentum=0.9, wd=0.01, eta=0.02, nesterov=nesterov)
    expected_kernel = numpy_lars(kernel0, [g for g, _ in grads], adapt=True, **hyper)
    expected_bias = numpy_lars(bias0, [g for _, g in grads], adapt=False, **hyper)
    np.testing.assert_allclose(layer.kernel.numpy(), expected_kernel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), expected_bias, rtol=1e-5, atol=1e-6)
    assert optimizer.adapts(layer.kernel) and not optimizer.adapts(layer.bias)


def _kernel_and_bias_after_steps(strategy, steps=3):
    """A kernel's and a bias's values after `steps` LARS updates, each replica of `strategy` applying half of
    every gradient."""
    rng = np.random.default_rng(0)
    with strategy.scope():
        kernel = keras.Variable(rng.normal(size=(3, 4)).astype(np.float32), name="kernel")
        bias = keras.Variable(rng.normal(size=(4,)).astype(np.float32), name="bias")
        optimizer = LARS(learning_rate=0.5, momentum=0.9, weight_decay_rate=0.01, eta=0.02)
        optimizer.build([kernel, bias])
    replicas = strategy.num_replicas_in_sync
    apply = tf.function(lambda grads: strategy.run(
        lambda grads: optimizer.apply([g / replicas for g in grads], [kernel, bias]), args=(grads,)))
    for _ in range(steps):
        apply([tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in (kernel, bias)])
    return kernel.numpy(), bias.numpy()


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_keras_without_get_variable_index_gets_the_same_update_with_a_warning(monkeypatch, caplog, replicas,
                                                                                 request):
    """LARS then finds each variable's velocity itself, also for the replica copies a strategy updates."""
    strategy = request.getfixturevalue("two_device_strategy") if replicas == 2 else tf.distribute.get_strategy()
    stock = _kernel_and_bias_after_steps(strategy)
    owner = next(cls for cls in LARS.__mro__ if "_get_variable_index" in vars(cls))
    monkeypatch.delattr(owner, "_get_variable_index")
    with caplog.at_level(logging.WARNING):
        fallback = _kernel_and_bias_after_steps(strategy)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "_get_variable_index" in warnings[0], warnings
    for got, want in zip(fallback, stock):
        np.testing.assert_array_equal(got, want)


def test_zero_weights_fall_back_to_plain_momentum():
    w = keras.Variable(np.zeros((2, 2), np.float32), name="kernel")
    optimizer = LARS(learning_rate=0.1, momentum=0.0, weight_decay_rate=0.0, eta=0.001)
    optimizer.apply([np.ones((2, 2), np.float32)], [w])
    np.testing.assert_allclose(w.numpy(), -0.1)


def test_config_round_trip():
    optimizer = LARS(learning_rate=0.3, momentum=0.8, weight_decay_rate=1e-5, eta=0.01, exclude=("bias",))
    clone = LARS.from_config(optimizer.get_config())
    assert clone.get_config() == optimizer.get_config()


def test_factory_builds_lars_with_the_schedule():
    from tf_msemb.training.optimizers import make_optimizer

    optimizer = make_optimizer(total_steps=100, name="lars", learning_rate=0.02, weight_decay=1e-6, warmup_steps=10)
    assert isinstance(optimizer, LARS)
    assert optimizer.weight_decay_rate == 1e-6 and optimizer.momentum == 0.9
    assert float(optimizer.learning_rate) == pytest.approx(0.002)


def test_a_real_encoders_layer_norms_and_biases_skip_decay_and_trust_ratio():
    """Found by layer type, not name: every LayerNormalization weight and every bias steps by lr x g exactly,
    every other weight by the trust-scaled, decayed rule (a rule matching only "layer_norm" misses `embeddings_norm`).
    """
    keras.utils.set_random_seed(0)
    encoder = ensure_built(SentenceEncoder(30, hidden_dim=8, num_layers=1, num_heads=2, intermediate_dim=16,
                                           max_sequence_length=8, dropout=0.0))
    excluded = {id(w) for layer in encoder._flatten_layers() if isinstance(layer, keras.layers.LayerNormalization)
                for w in layer.weights}
    excluded |= {id(w) for w in encoder.trainable_variables if w.name == "bias"}
    variables = encoder.trainable_variables
    assert 4 <= len(excluded) < len(variables)
    rng = np.random.default_rng(1)
    grads = [rng.normal(size=v.shape).astype(np.float32) for v in variables]
    before = [v.numpy() for v in variables]
    optimizer = LARS(learning_rate=0.5, momentum=0.0, weight_decay_rate=0.01, eta=0.02)
    optimizer.apply(grads, variables)
    for variable, g, w in zip(variables, grads, before):
        adapt = id(variable) not in excluded
        assert optimizer.adapts(variable) == adapt, variable.path
        want = numpy_lars(w, [g], lr=0.5, momentum=0.0, wd=0.01, eta=0.02, adapt=adapt)
        np.testing.assert_allclose(variable.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=variable.path)
