"""Test helper: an encoder's weights drawn at random, large enough for a wrong mask or position to show."""

import numpy as np

from tf_msemb.models.encoder import ensure_built


def randomize(encoder, std=0.5, trainable_only=False):
    """`encoder` built, its (trainable) weights drawn from N(0, std^2) in `encoder.weights` order; returns it."""
    ensure_built(encoder)
    rng = np.random.default_rng(0)
    for variable in encoder.trainable_weights if trainable_only else encoder.weights:
        variable.assign(rng.normal(0.0, std, variable.shape).astype(np.float32))
    return encoder
