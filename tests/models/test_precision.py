"""Mixed precision and XLA switches leave the losses of a tiny model close to float32's."""

import numpy as np
import pytest
import tensorflow as tf

from objectives.replica_check import random_tokens
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.translation_ranking import TranslationRanking
from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.models.precision import precision_policy
from tf_msemb.models.precision import wrap_optimizer
from conftest import needs_bfloat16
from conftest import BFLOAT16_MARKS

VOCABULARY = 50


def _losses(precision, jit_compile=False, steps=4):
    """Per-step losses of the same tiny model (same initial weights) trained on one fixed batch."""
    rng = np.random.default_rng(0)
    batch = {"src": random_tokens(rng, (8, 12), VOCABULARY), "tgt": random_tokens(rng, (8, 12), VOCABULARY)}
    tf.keras.utils.set_random_seed(1)
    with precision_policy(precision):
        encoder = SentenceEncoder(vocabulary_size=VOCABULARY, max_sequence_length=12, hidden_dim=32, num_layers=1,
                                  num_heads=2, intermediate_dim=64, dropout=0.0)
        model = TranslationRanking(encoder)
        model.build()
        model.compile(optimizer=wrap_optimizer(make_optimizer(total_steps=steps, learning_rate=1e-3,
                                                              warmup_steps=0, decay="constant"), precision))
    step = tf.function(model.train_step, jit_compile=jit_compile)
    # A float16 step whose gradients overflow is skipped (and the loss scale
    # halved), so losses are keyed by the optimizer step they were computed at.
    losses = {}
    while int(model.optimizer.iterations) < steps:
        model.reset_metrics()
        before = int(model.optimizer.iterations)
        losses[before] = float(step(batch)["loss"])
    return np.array([losses[k] for k in range(steps)]), encoder


@needs_bfloat16
def test_bfloat16_computes_in_bfloat16_and_keeps_float32_weights():
    _, encoder = _losses("mixed_bfloat16", steps=1)
    assert encoder.backbone.transformer_layers[0].compute_dtype == "bfloat16"
    assert all(v.dtype == "float32" for v in encoder.trainable_variables)


@pytest.mark.slow
@pytest.mark.parametrize("precision, tolerance", [pytest.param("mixed_bfloat16", 0.03, marks=BFLOAT16_MARKS),
                                                  ("mixed_float16", 0.005)])
def test_mixed_precision_losses_match_float32(precision, tolerance):
    reference, _ = _losses("float32")
    losses, encoder = _losses(precision)
    assert reference[-1] < 0.1 * reference[0]  # the run learns, so equal losses mean equal training
    # bfloat16 keeps 8 mantissa bits (relative error ~4e-3 per op), float16 keeps 11; the
    # absolute term covers the last, small losses.
    np.testing.assert_allclose(losses, reference, rtol=tolerance, atol=0.02)
    vectors = encoder(random_tokens(np.random.default_rng(3), (2, 12), VOCABULARY))
    assert vectors.dtype == tf.float32


def test_float16_uses_dynamic_loss_scaling():
    import keras

    optimizer = wrap_optimizer(keras.optimizers.Adam(), "mixed_float16")
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert float(optimizer.scale_loss(tf.constant(1.0))) > 1.0
    assert wrap_optimizer(keras.optimizers.Adam(), "mixed_bfloat16").__class__ is keras.optimizers.Adam


def test_xla_losses_match():
    reference, _ = _losses("float32")
    losses, _ = _losses("float32", jit_compile=True)
    np.testing.assert_allclose(losses, reference, rtol=1e-4)


def test_unknown_precision_is_named():
    with pytest.raises(ValueError, match="Unknown precision 'float8'"):
        with precision_policy("float8"):
            pass
