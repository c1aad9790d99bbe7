"""Momentum copies (EMA teacher, MoCo momentum encoders): a state copy and its update."""

import keras
import numpy as np
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.momentum import momentum_copy
from tf_msemb.objectives.momentum import momentum_update


def _encoder():
    return SentenceEncoder(30, hidden_dim=8, num_layers=1, num_heads=2, intermediate_dim=16, max_sequence_length=8)


def test_copy_starts_equal_and_is_state_not_trained():
    keras.utils.set_random_seed(1)
    source = _encoder()
    copy = momentum_copy(source)
    assert copy is not source and not copy.trainable_weights
    for a, b in zip(copy.weights, source.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert a is not b
    # Every replica writes the same update; only the first replica's write must land (see momentum.py).
    assert all(w.value.aggregation == tf.VariableAggregation.ONLY_FIRST_REPLICA for w in copy.weights)


def test_update_moves_the_copy_towards_the_source():
    keras.utils.set_random_seed(2)
    source = _encoder()
    copy = momentum_copy(source)
    start = [w.numpy().copy() for w in copy.weights]
    source.set_weights([w + 1.0 if w.dtype.kind == "f" else w for w in source.get_weights()])
    momentum_update(copy, source, tf.constant(0.75))
    for before, after, target in zip(start, copy.weights, source.weights):
        if "float" in str(target.dtype):
            np.testing.assert_allclose(after.numpy(), 0.75 * before + 0.25 * target.numpy(), rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(after.numpy(), before)
    assert any(not np.allclose(a, w.numpy()) for a, w in zip(start, copy.weights))


def test_momentum_one_keeps_the_copy_and_zero_takes_the_source():
    source = _encoder()
    keep, take = momentum_copy(source), momentum_copy(source)
    start = [w.numpy().copy() for w in keep.weights]
    source.set_weights([w * 2.0 + 1.0 if w.dtype.kind == "f" else w for w in source.get_weights()])
    momentum_update(keep, source, 1.0)
    momentum_update(take, source, 0.0)
    for before, kept, taken, target in zip(start, keep.weights, take.weights, source.weights):
        np.testing.assert_array_equal(kept.numpy(), before)
        np.testing.assert_allclose(taken.numpy(), target.numpy(), rtol=1e-6)
