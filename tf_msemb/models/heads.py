"""Heads placed on top of an encoder."""

import keras
import numpy as np

from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import l2_normalize


@keras.saving.register_keras_serializable(package="tf_msemb")
class ProjectedEncoder(keras.Model):
    """An encoder followed by a learned linear map to `output_dim`.

    Used when a student's width differs from its teacher's (seed 001): the
    projection is part of the exported model, so exports live in the
    teacher's space.
    """

    def __init__(self, encoder, output_dim, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.output_dim = output_dim
        self.projection = keras.layers.Dense(output_dim, name="projection")

    def build(self, inputs_shape):
        if not self.encoder.built:
            self.encoder.build(inputs_shape)
        self.projection.build((None, self.encoder.output_dim))
        self.built = True

    def call(self, inputs, training=False):
        return keras.ops.cast(self.projection(self.encoder(inputs, training=training)), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder), output_dim=self.output_dim)
        return config

    @classmethod
    def from_config(cls, config):
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="tf_msemb")
class PrincipalAxes(ProjectedEncoder):
    """An encoder's vectors turned onto their principal axes, so that their first d dimensions keep the most.

    `y = x R` with R orthogonal, its columns the eigenvectors of the vectors'
    second-moment matrix `E[x x^T]` on a sample of sentences, largest
    eigenvalue first (`adapt`). R changes no cosine; the first d columns
    span the d-dimensional subspace keeping the most of the vectors' energy
    (Eckart & Young 1936), so an export cut to d (`inference_module.output_dim`)
    keeps more than a cut of the raw vectors does, for a model trained
    without nested widths. Uncentred, so the rotation stays a rotation.
    `assign_rotation` takes another rotation instead (the axes turned by
    `training.nested_rotation`). Never trained with the encoder.
    """

    def __init__(self, encoder, output_dim=None, **kwargs):
        super().__init__(encoder, output_dim or encoder.output_dim, **kwargs)
        if self.output_dim != encoder.output_dim:
            raise ValueError(f"PrincipalAxes keeps the encoder's {encoder.output_dim} dimensions; got "
                             f"output_dim={output_dim}.")
        self.projection.trainable = False

    def adapt(self, vectors):
        """Sets R from `[n, d]` `vectors` (the encoder's, on sentences like those it will serve); returns the
        eigenvalues of `E[x x^T]`, largest first (their running sum: the energy a cut keeps)."""
        vectors = np.asarray(vectors, np.float64)
        if vectors.ndim != 2 or vectors.shape[1] != self.output_dim or len(vectors) < self.output_dim:
            raise ValueError(f"PrincipalAxes.adapt needs at least {self.output_dim} vectors of width "
                             f"{self.output_dim}; got an array of shape {vectors.shape}.")
        eigenvalues, eigenvectors = np.linalg.eigh(vectors.T @ vectors / len(vectors))
        order = np.argsort(-eigenvalues, kind="stable")
        rotation = eigenvectors[:, order]
        # Each axis points where its largest entry is positive: the same R from the same vectors, any LAPACK.
        rotation *= np.sign(rotation[np.argmax(np.abs(rotation), axis=0), np.arange(self.output_dim)])
        self.assign_rotation(rotation)
        return eigenvalues[order]

    def assign_rotation(self, rotation):
        """Sets R to `rotation` (`[d, d]`, orthogonal: e.g. the axes turned by `training.nested_rotation`)."""
        rotation = np.asarray(rotation, np.float64)
        if rotation.shape != (self.output_dim, self.output_dim) or not np.allclose(
                rotation.T @ rotation, np.eye(self.output_dim), atol=1e-4):
            raise ValueError(f"PrincipalAxes needs an orthogonal {self.output_dim} x {self.output_dim} rotation; got "
                             f"shape {rotation.shape}.")
        ensure_built(self)
        self.projection.kernel.assign(rotation.astype(np.float32))
        self.projection.bias.assign(np.zeros(self.output_dim, np.float32))


@keras.saving.register_keras_serializable(package="tf_msemb")
class DenseHead(keras.Model):
    """An encoder's vectors through dense layers with activations, then optionally L2-normalized.

    sentence-transformers' Dense modules (distiluse: 768 -> 512, tanh) after
    the pooling; `models.st_modules.dense_head` loads their weights. Its own
    class, not an `Embedder`, so packed inference (which knows only the
    pooling) falls back to padded batches instead of leaving the layers out.

    Args:
        encoder: tokens -> `[b, d]`, unnormalized.
        dense_layers: one dict per layer, `units`, `activation` (a Keras name)
            and `use_bias`, applied in order.
        normalize: L2-normalize the output.
    """

    def __init__(self, encoder, dense_layers, normalize=False, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.dense_specs = [dict(spec) for spec in dense_layers]
        self.normalize = normalize
        self.dense = [keras.layers.Dense(spec["units"], activation=spec["activation"],
                                         use_bias=spec.get("use_bias", True), name=f"dense_{i}")
                      for i, spec in enumerate(self.dense_specs)]

    @property
    def output_dim(self):
        return self.dense_specs[-1]["units"] if self.dense_specs else self.encoder.output_dim

    @property
    def vocabulary_size(self):
        return self.encoder.vocabulary_size

    def build(self, inputs_shape):
        if not self.encoder.built:
            self.encoder.build(inputs_shape)
        width = self.encoder.output_dim
        for layer, spec in zip(self.dense, self.dense_specs):
            layer.build((None, width))
            width = spec["units"]
        self.built = True

    def call(self, inputs, training=False):
        x = self.encoder(inputs, training=training)
        for layer in self.dense:
            x = layer(x)
        x = keras.ops.cast(x, "float32")
        return l2_normalize(x) if self.normalize else x

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder), dense_layers=self.dense_specs,
                      normalize=self.normalize)
        return config

    @classmethod
    def from_config(cls, config):
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
