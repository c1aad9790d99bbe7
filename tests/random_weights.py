"""Test helper: an encoder's weights drawn at random, large enough for a wrong mask or position to show."""

import keras
import numpy as np
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built


def randomize(encoder, std=0.5, trainable_only=False):
    """`encoder` built, its (trainable) weights drawn from N(0, std^2) in `encoder.weights` order; returns it."""
    ensure_built(encoder)
    rng = np.random.default_rng(0)
    for variable in encoder.trainable_weights if trainable_only else encoder.weights:
        variable.assign(rng.normal(0.0, std, variable.shape).astype(np.float32))
    return encoder


def scratch_encoder(tokenizer, pooling="mean"):
    """A two-layer from-scratch `SentenceEncoder` over `tokenizer`, weights N(0, 0.2^2) (layer-norm scales about 1):
    large enough that a token row or a layer in the wrong place shows in its vectors after an export elsewhere."""
    keras.utils.set_random_seed(3)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=32, num_layers=2, num_heads=4, intermediate_dim=64,
                              max_sequence_length=tokenizer.max_length, pooling=pooling)
    encoder(tokenizer(tf.constant(["x"])))
    rng = np.random.default_rng(0)
    for weight in encoder.weights:
        if "seed_generator" not in weight.path:
            weight.assign(rng.normal(0.0, 0.2, weight.shape).astype("float32") + ("gamma" in weight.path))
    return encoder
