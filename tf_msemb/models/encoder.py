"""Token ids and mask in, one vector per sentence out: `Embedder`, and `SentenceEncoder` trained from scratch."""

import gin
import keras
import keras_hub
import tensorflow as tf
from absl import logging
from keras import ops

from tf_msemb.models.backbone import TransformerBackbone
from tf_msemb.models.packed_backbone import PackedBackbone
from tf_msemb.models.packed_backbone import in_xla_context
from tf_msemb.models.packed_backbone import read_supported
from tf_msemb.models.pooling import make_pooling

# Padded grids a packed training forward runs attention on (`PackedBackbone.attention_groups`): a 64-sentence
# Multi30k batch of 971-1551 tokens on grids of 27-70 positions spent a quarter of its step on attention.
TRAINING_ATTENTION_GROUPS = 4


@keras.saving.register_keras_serializable(package="tf_msemb")
class Embedder(keras.Model):
    """A backbone's token states, pooled and optionally L2-normalized (as keras-hub's text embedders).

    Takes `{"token_ids": int [b, l], "padding_mask": bool [b, l]}` and returns
    float32 `[b, output_dim]`, under mixed precision too: losses and exports
    want full-precision vectors. A backbone that takes BERT-style segment ids
    gets zeros; a backbone's own pooler (BERT's `pooled_dense`) is unused here,
    so it is frozen.

    Args:
        backbone: a `keras_hub.models.Backbone` returning token states, or a
            dict of them under `"sequence_output"` (a `TransformerBackbone`,
            a pretrained BERT).
        pooling: `"mean"`, `"max"`, `"first"`, `"attention"`, `"mean_sqrt_len"`;
            names joined by `+` (`"first+mean"`), concatenated as they are
            (sentence-transformers' pooling of several modes); or a list of
            names, concatenated and projected to `pooled_dim` (seed 004).
        pooled_dim: projection size for a list of poolings.
        normalize: L2-normalize the output.
        packed_training: run training calls (dropout on) padding-free: the
            backbone as a `PackedBackbone` on the real tokens only, its states
            laid back on the padded grid for pooling. Same losses and
            gradients as the padded forward (float32: within 1e-5), less
            work the more padding a batch carries. Needs right-padded inputs
            (the tokenizers' and `make_dataset`'s); a backbone that cannot be
            packed trains padded (logged once), and so does a step that XLA
            compiles (`jit_compile`, TPUs: static shapes only). Inference
            calls always run the Keras layers.
    """

    def __init__(self, backbone, pooling="mean", pooled_dim=None, normalize=False, packed_training=True, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.pooling_spec = pooling if isinstance(pooling, str) else tuple(pooling)
        self.pooled_dim = pooled_dim
        self.normalize = normalize
        self.packed_training = packed_training
        self._packing_declined = None
        self.pooling = make_pooling(self.pooling_spec, pooled_dim, dtype=kwargs.get("dtype"))
        self._needs_segments = "segment_ids" in backbone.input
        for layer in backbone.layers:
            if layer.name == "pooled_dense":
                layer.trainable = False

    @property
    def vocabulary_size(self):
        return self.backbone.vocabulary_size

    @property
    def hidden_dim(self):
        return self.backbone.hidden_dim

    @property
    def output_dim(self):
        if isinstance(self.pooling_spec, str):
            return self.hidden_dim * len(self.pooling_spec.split("+"))
        return self.pooled_dim

    def build(self, inputs_shape):
        ids_shape = tuple(inputs_shape["token_ids"])
        self.pooling.build(ids_shape + (self.hidden_dim,), ids_shape)
        self.built = True

    def call(self, inputs, training=False):
        token_ids, mask = inputs["token_ids"], inputs["padding_mask"]
        weights = self._packable() if training and self.packed_training and not in_xla_context() else None
        if weights is not None:
            hidden = self._packed_states(weights, token_ids, mask)
        else:
            features = {"token_ids": token_ids, "padding_mask": mask}
            if self._needs_segments:
                features["segment_ids"] = ops.zeros_like(token_ids)
            hidden = self.backbone(features, training=training)
            if isinstance(hidden, dict):
                hidden = hidden["sequence_output"]
        pooled = ops.cast(self.pooling(hidden, mask), "float32")
        return l2_normalize(pooled) if self.normalize else pooled

    def _packable(self):
        """The backbone's weights as packing reads them, or None (the reason logged once) when it cannot be packed."""
        weights, reason = read_supported(self.backbone)
        if reason and self._packing_declined is None:
            logging.warning("%s trains on padded batches: %s.", self.name, reason)
            self._packing_declined = reason
        return weights

    def _packed_states(self, weights, token_ids, mask):
        """The backbone's training-mode token states from a `PackedBackbone`, on the padded `[b, l, d]` grid."""
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        ids = tf.RaggedTensor.from_tensor(token_ids, lengths=lengths)
        states = PackedBackbone(weights, self.backbone.compute_dtype, attention_groups=TRAINING_ATTENTION_GROUPS)(
            ids, training=True)
        grid = tf.RaggedTensor.from_row_splits(states, ids.row_splits, validate=False).to_tensor(
            shape=tf.concat([tf.shape(token_ids), [states.shape[-1]]], axis=0))
        return tf.cast(grid, self.backbone.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            backbone=keras.saving.serialize_keras_object(self.backbone),
            pooling=self.pooling_spec if isinstance(self.pooling_spec, str) else list(self.pooling_spec),
            pooled_dim=self.pooled_dim,
            normalize=self.normalize,
            packed_training=self.packed_training,
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "backbone": keras.saving.deserialize_keras_object(config["backbone"])})


@keras.saving.register_keras_serializable(package="tf_msemb")
@gin.configurable(denylist=["vocabulary_size"])
class SentenceEncoder(Embedder):
    """An `Embedder` around a `TransformerBackbone` made from its arguments (the encoder trained from scratch).

    Its config is flat, the backbone's arguments beside the pooling ones, so
    gin bindings (`SentenceEncoder.hidden_dim`) and saved configs name the
    transformer's sizes directly. Arguments: `TransformerBackbone`'s and
    `Embedder`'s.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        num_layers=4,
        num_heads=4,
        intermediate_dim=1024,
        max_sequence_length=128,
        dropout=0.1,
        activation="gelu",
        pooling="mean",
        pooled_dim=None,
        normalize=False,
        layer_norm_epsilon=1e-5,
        **kwargs,
    ):
        backbone = TransformerBackbone(
            vocabulary_size, hidden_dim, num_layers, num_heads, intermediate_dim, max_sequence_length,
            dropout=dropout, activation=activation, layer_norm_epsilon=layer_norm_epsilon, dtype=kwargs.get("dtype"),
        )
        super().__init__(backbone, pooling=pooling, pooled_dim=pooled_dim, normalize=normalize, **kwargs)

    def get_config(self):
        config = super().get_config()
        del config["backbone"]
        config.update({name: getattr(self.backbone, name) for name in TransformerBackbone.ARGUMENTS})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


TOKEN_SHAPES = {"token_ids": (None, None), "padding_mask": (None, None)}


def set_packed_training(model, enabled):
    """Sets `packed_training` of every `Embedder` inside `model` (itself included); returns how many were set."""
    embedders = [layer for layer in model._flatten_layers(include_self=True) if isinstance(layer, Embedder)]
    for embedder in embedders:
        embedder.packed_training = enabled
    return len(embedders)


def freeze_token_embeddings(model):
    """Makes the token embedding table of every backbone inside `model` non-trainable; returns the tables.

    A frozen table gets no gradient, no optimizer moments and no update (the
    momentum copies of seed 000 and seed 002 skip it too: it stays what they
    copied). Position and token-type embeddings and everything above train
    as before. An export of the model lists the table among its `variables`
    but not its `trainable_variables`, so fine-tuning the export keeps it
    frozen as training did.
    """
    backbones = [layer for layer in ensure_built(model)._flatten_layers(include_self=True)
                 if isinstance(layer, keras_hub.models.Backbone)]
    tables = [backbone.token_embedding for backbone in backbones if backbone.token_embedding is not None]
    if not tables:
        raise ValueError(f"{model.name} has no backbone with a token embedding table to freeze.")
    for table in tables:
        table.trainable = False
    return tables


def ensure_built(encoder):
    """Creates the weights of a tokens -> vectors model that has none yet; returns it."""
    if not encoder.built:
        encoder.build(TOKEN_SHAPES)
    return encoder


def l2_normalize(x, epsilon=1e-12):
    """Unit vectors along the last axis; a zero vector stays finite."""
    x = ops.cast(x, "float32")
    return x / ops.sqrt(ops.maximum(ops.sum(x * x, axis=-1, keepdims=True), epsilon))
