"""Padding-free training (`Embedder.packed_training`): the padded forward's losses and gradients, dropout included."""

import logging
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from random_weights import randomize
from tf_msemb.models import packed_backbone
from tf_msemb.models.encoder import Embedder
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import set_packed_training
from tf_msemb.models.heads import ProjectedEncoder

# Lengths from 2 tokens to the tokenizer's limit of 48: most of the padded grid is padding.
TEXTS = ["", "Hi.", "Ein Mann spielt Gitarre auf einer Bühne vor vielen Leuten am Abend.", "The dog runs.",
         "x " * 60, "Une femme lit un livre.", "A"]


def _randomized(encoder):
    """Built, trainable weights drawn from N(0, 0.2^2), large enough for a wrong position or mask to show."""
    return randomize(encoder, std=0.2, trainable_only=True)


def _sentence_encoder(tokenizer, dropout=0.0, **kwargs):
    return _randomized(SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=2, num_heads=2,
                                       intermediate_dim=32, max_sequence_length=tokenizer.max_length,
                                       dropout=dropout, **kwargs))


def _bert_encoder(tokenizer, dropout=0.0, **kwargs):
    backbone = keras_hub.models.BertBackbone(vocabulary_size=tokenizer.vocabulary_size, num_layers=2, num_heads=2,
                                             hidden_dim=16, intermediate_dim=32, dropout=dropout,
                                             max_sequence_length=tokenizer.max_length)
    return _randomized(Embedder(backbone, **kwargs))


def _loss_and_gradients(encoder, batch, packed):
    """A loss that weighs every output unit differently, and its gradients for every trainable weight."""
    encoder.packed_training = packed
    with tf.GradientTape() as tape:
        vectors = encoder(batch, training=True)
        weights = tf.reshape(tf.range(tf.size(vectors), dtype=tf.float32), vectors.shape) / 10.0
        loss = tf.reduce_sum(tf.sin(vectors * weights))
    gradients = tape.gradient(loss, encoder.trainable_weights)
    return loss.numpy(), [None if g is None else tf.convert_to_tensor(g).numpy() for g in gradients]


@pytest.mark.parametrize("make, options", [
    (_sentence_encoder, {"pooling": "mean"}),
    (_sentence_encoder, {"pooling": "attention", "normalize": True}),
    (_bert_encoder, {"pooling": "first"}),
    (_bert_encoder, {"pooling": ["mean", "max"], "pooled_dim": 8}),
])
def test_packed_training_has_the_padded_loss_and_gradients(tokenizer, make, options):
    """Without dropout, the two paths are the same function: the loss and every gradient within 1e-5 (of the
    largest gradient entry: attention's key biases have a true gradient of zero, both paths give rounding noise)."""
    encoder = make(tokenizer, **options)
    batch = tokenizer(tf.constant(TEXTS))
    loss, gradients = _loss_and_gradients(encoder, batch, packed=True)
    padded_loss, padded_gradients = _loss_and_gradients(encoder, batch, packed=False)
    np.testing.assert_allclose(loss, padded_loss, rtol=1e-5)
    names = [v.path for v in encoder.trainable_weights]
    assert len(gradients) == len(padded_gradients) > 10
    scale = max(np.abs(g).max() for g in padded_gradients if g is not None)
    for name, got, want in zip(names, gradients, padded_gradients):
        # BERT's unused pooler gets no gradient on either path.
        assert (got is None) == (want is None), name
        if want is not None:
            assert np.abs(got - want).max() <= 1e-5 * scale, name


@pytest.mark.parametrize("texts", [TEXTS, TEXTS[2:4], TEXTS[4:5]], ids=["7", "2", "1"])
def test_attention_on_length_sorted_groups_gives_the_same_states(tokenizer, texts):
    """Attention on 4 grids of length-sorted sentences is the one grid's function, also with fewer sentences than
    groups (empty groups); the training forward runs it (`TRAINING_ATTENTION_GROUPS`)."""
    encoder = _sentence_encoder(tokenizer)
    batch = tokenizer(tf.constant(texts))
    lengths = tf.reduce_sum(tf.cast(batch["padding_mask"], tf.int32), axis=1)
    ids = tf.RaggedTensor.from_tensor(batch["token_ids"], lengths=lengths)
    weights = packed_backbone.read_supported(encoder.backbone)[0]
    one_grid = packed_backbone.PackedBackbone(weights)(ids)
    np.testing.assert_allclose(packed_backbone.PackedBackbone(weights, attention_groups=4)(ids), one_grid, atol=1e-5)


def test_a_projected_encoder_trains_packed_too(tokenizer):
    encoder = ProjectedEncoder(_sentence_encoder(tokenizer), 8)
    ensure_built(encoder)
    batch = tokenizer(tf.constant(TEXTS))
    loss, gradients = _loss_and_gradients(encoder, batch, packed=True)
    padded_loss, padded_gradients = _loss_and_gradients(encoder, batch, packed=False)
    np.testing.assert_allclose(loss, padded_loss, rtol=1e-5)
    scale = max(np.abs(g).max() for g in padded_gradients)
    for got, want in zip(gradients, padded_gradients):
        assert np.abs(got - want).max() <= 1e-5 * scale


def _seed_states(encoder):
    return [v.numpy().copy() for v in encoder.non_trainable_variables if v.path.endswith("seed_generator_state")]


@pytest.mark.parametrize("make", [_sentence_encoder, _bert_encoder])
def test_packed_training_applies_the_layers_dropout(tokenizer, make):
    """Dropout runs through the Keras `Dropout` layers' seed states (the ones checkpoints keep and the trainer
    decorrelates across replicas), at their rates: a packed forward with dropout differs from inference, draws
    again on each call, and advances every dropout layer's seed state."""
    encoder = make(tokenizer, dropout=0.3)
    batch = tokenizer(tf.constant(TEXTS))
    inference = encoder(batch, training=False).numpy()
    before = _seed_states(encoder)
    first = encoder(batch, training=True).numpy()
    after = _seed_states(encoder)
    second = encoder(batch, training=True).numpy()
    assert np.abs(first - inference).max() > 1e-2 and np.abs(first - second).max() > 1e-2
    # embeddings + 2 x (attention probabilities, attention output, feed-forward output)
    assert len(before) == 7
    assert all(np.any(b != a) for b, a in zip(before, after))


def test_dropout_noise_has_the_padded_paths_strength(tokenizer):
    """The mean squared deviation from inference over many draws matches the padded path's (a rate read wrong, or
    a dropout left out, moves it by far more than the 15 % allowed). Seeded: with 60 draws the ratio itself varies
    by several percent from run to run (one unseeded run gave 1.157)."""
    keras.utils.set_random_seed(0)
    encoder = _sentence_encoder(tokenizer, dropout=0.2)
    batch = tokenizer(tf.constant(TEXTS))
    inference = encoder(batch, training=False).numpy()

    def spread(packed):
        encoder.packed_training = packed
        return np.mean([np.mean((encoder(batch, training=True).numpy() - inference) ** 2) for _ in range(60)])

    packed, padded = spread(True), spread(False)
    assert abs(packed / padded - 1) < 0.15, (packed, padded)


def test_a_backbone_packing_cannot_read_trains_padded_with_one_warning(tokenizer, monkeypatch, caplog):
    encoder = _sentence_encoder(tokenizer)
    batch = tokenizer(tf.constant(TEXTS))
    padded = encoder(batch, training=False).numpy()
    monkeypatch.setitem(packed_backbone.ENCODER_SUBLAYERS, "attention", "_renamed_self_attention_layer")
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            np.testing.assert_allclose(encoder(batch, training=True).numpy(), padded, atol=1e-5)
    warnings = [r.getMessage() for r in caplog.records if "trains on padded batches" in r.getMessage()]
    assert len(warnings) == 1 and "_renamed_self_attention_layer" in warnings[0]


def _no_xla_test(graph):
    """`GraphOrParentsInXlaContext` of a TensorFlow that renamed the graph internals it reads."""
    raise AttributeError("'FuncGraph' object has no attribute '_get_control_flow_context'")


@pytest.mark.parametrize("private", [None, _no_xla_test], ids=["missing", "failing"])
def test_without_tensorflows_xla_test_training_is_padded_with_one_warning(tokenizer, monkeypatch, caplog, private):
    """A TensorFlow release that renamed the private XLA test (or the graph internals it reads): packing might be
    inside XLA, where it fails to compile, so every training call runs padded."""
    encoder = _sentence_encoder(tokenizer)
    batch = tokenizer(tf.constant(TEXTS))
    padded = encoder(batch, training=False).numpy()
    monkeypatch.setattr(packed_backbone, "GraphOrParentsInXlaContext", private)
    monkeypatch.setattr(Embedder, "_packed_states", None)  # packing would fail calling it
    packed_backbone._warn_xla_unknown.cache_clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            np.testing.assert_allclose(encoder(batch, training=True).numpy(), padded, atol=1e-5)
    packed_backbone._warn_xla_unknown.cache_clear()
    warnings = [r.getMessage() for r in caplog.records if "GraphOrParentsInXlaContext" in r.getMessage()]
    assert len(warnings) == 1 and "packed training is off" in warnings[0]


def test_the_xla_test_module_failing_to_import_is_survived():
    """The import of packed_backbone (so of every training run) survives TensorFlow moving `control_flow_util`."""
    code = ("import sys, tensorflow; sys.modules['tensorflow.python.ops.control_flow_util'] = None; "
            "from tf_msemb.models import packed_backbone; "
            "print(packed_backbone.in_xla_context(), packed_backbone.in_xla_context())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "True"]
    assert result.stderr.count("cannot tell whether a graph is XLA-compiled") == 1, result.stderr[-3000:]


def test_set_packed_training_reaches_nested_embedders(tokenizer):
    inner = _sentence_encoder(tokenizer)
    outer = ProjectedEncoder(inner, 8)
    assert inner.packed_training
    assert set_packed_training(outer, False) == 1 and not inner.packed_training


def test_packed_training_is_in_the_config(tokenizer):
    encoder = _sentence_encoder(tokenizer, packed_training=False)
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(encoder))
    assert copy.packed_training is False


def test_a_step_xla_compiles_trains_padded(tokenizer):
    """XLA compiles static shapes only: inside `jit_compile` the training call runs the Keras layers (packing's
    ragged ops would fail to compile) and gives the padded path's gradients."""
    encoder = _sentence_encoder(tokenizer)
    batch = tokenizer(tf.constant(TEXTS))

    @tf.function(jit_compile=True)
    def gradients(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.sin(encoder(batch, training=True) * 3.0))
        return [tf.convert_to_tensor(g) for g in tape.gradient(loss, encoder.trainable_weights)]

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.sin(encoder(batch, training=True) * 3.0))
    eager = tape.gradient(loss, encoder.trainable_weights)
    for got, want in zip(gradients(batch), eager):
        np.testing.assert_allclose(got.numpy(), tf.convert_to_tensor(want).numpy(), atol=1e-4)
