"""Heads on an encoder: `PrincipalAxes`' rotation against NumPy, on inputs where the wrong axes keep less."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import corpus_file
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.heads import PrincipalAxes

SENTENCES = ["A man plays a guitar.", "Ein Mann spielt Gitarre.", "Un homme joue de la guitare.", "Two dogs run.",
             "Zwei Hunde rennen.", "Deux chiens courent.", "A woman reads.", "Eine Frau liest.", ""]


@pytest.fixture(scope="module")
def encoder(tokenizer):
    keras.utils.set_random_seed(11)
    return SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32,
                           max_sequence_length=tokenizer.max_length)


def skewed_vectors(n=400, width=16, seed=0):
    """Vectors whose energy lies mostly along two oblique directions, neither of them the first coordinates."""
    rng = np.random.default_rng(seed)
    directions = np.linalg.qr(rng.normal(size=(width, width)))[0][:, 10:12]
    x = rng.normal(size=(n, 2)) * [5.0, 3.0] @ directions.T + 0.1 * rng.normal(size=(n, width))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_adapt_puts_the_most_energy_first_and_the_rest_in_descending_order(encoder):
    axes = PrincipalAxes(encoder)
    vectors = skewed_vectors()
    eigenvalues = axes.adapt(vectors)
    rotation = axes.projection.kernel.numpy()
    np.testing.assert_allclose(rotation.T @ rotation, np.eye(16), atol=1e-5)
    rotated = vectors @ rotation
    energy = (rotated ** 2).mean(axis=0)
    # Every axis carries its eigenvalue, largest first (eigh's ascending order, or rows taken for columns, fail).
    np.testing.assert_allclose(energy, eigenvalues, rtol=1e-4, atol=1e-6)
    assert np.all(np.diff(eigenvalues) <= 1e-9)
    assert energy[:2].sum() > 0.95 and (vectors[:, :2] ** 2).mean(axis=0).sum() < 0.5
    # The same vectors, shuffled, give the same axes (the sign convention fixes each direction).
    again = PrincipalAxes(encoder)
    again.adapt(vectors[::-1])
    np.testing.assert_allclose(again.projection.kernel.numpy(), rotation, atol=1e-5)


def test_the_rotated_encoder_keeps_every_cosine_and_its_cut_keeps_more_than_the_raw_cut(encoder, tokenizer):
    lines = [line.strip() for lang in ("en", "de") for line in open(corpus_file("train", lang), encoding="utf-8")]
    tokens = tokenizer(tf.constant(SENTENCES + lines[:40] + lines[-40:]))
    raw = encoder(tokens).numpy()
    axes = PrincipalAxes(encoder)
    axes.adapt(raw)
    rotated = axes(tokens).numpy()
    # A rotation: cosines as they were (centring first, or whitening by the eigenvalues, would change them).
    np.testing.assert_allclose(rotated @ rotated.T, raw @ raw.T, atol=1e-5)

    def kept(vectors, width):
        return float((vectors[:, :width] ** 2).sum() / (vectors ** 2).sum())

    assert kept(rotated, 4) > kept(raw, 4) + 0.05
    # Fixed: a gradient step on the rotated encoder moves the encoder, never the rotation.
    before, encoder_before = axes.projection.kernel.numpy(), encoder.trainable_variables[0].numpy()
    optimizer = keras.optimizers.SGD(0.5)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(axes(tokens)[:, 0])
    optimizer.apply(tape.gradient(loss, axes.trainable_variables), axes.trainable_variables)
    np.testing.assert_array_equal(axes.projection.kernel.numpy(), before)
    assert not np.allclose(encoder.trainable_variables[0].numpy(), encoder_before)
    # Its config rebuilds it (an export's metadata): the same class around the same encoder.
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(axes))
    assert isinstance(rebuilt, PrincipalAxes) and rebuilt.output_dim == 16


def test_too_few_vectors_or_the_wrong_width_is_refused(encoder):
    axes = PrincipalAxes(encoder)
    with pytest.raises(ValueError, match="at least 16 vectors of width 16"):
        axes.adapt(np.ones((8, 16)))
    with pytest.raises(ValueError, match="shape"):
        axes.adapt(np.ones((100, 12)))
    with pytest.raises(ValueError, match="keeps the encoder's 16 dimensions"):
        PrincipalAxes(encoder, output_dim=8)


def test_assign_rotation_takes_a_rotation_only(encoder):
    axes = PrincipalAxes(encoder)
    rotation = np.linalg.qr(np.random.default_rng(0).normal(size=(16, 16)))[0]
    axes.assign_rotation(rotation)
    np.testing.assert_allclose(axes.projection.kernel.numpy(), rotation, atol=1e-6)
    with pytest.raises(ValueError, match="orthogonal 16 x 16"):
        axes.assign_rotation(rotation * 1.1)
    with pytest.raises(ValueError, match="orthogonal 16 x 16"):
        axes.assign_rotation(rotation[:, :8])
