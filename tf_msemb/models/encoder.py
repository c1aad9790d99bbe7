"""`SentenceEncoder`: token ids and mask in, one vector per sentence out."""

import gin
import keras
import keras_hub
from keras import ops

from tf_msemb.models.pooling import make_pooling


@keras.saving.register_keras_serializable(package="tf_msemb")
@gin.configurable(denylist=["vocabulary_size"])
class SentenceEncoder(keras.Model):
    """Transformer encoder with a pooling head.

    Takes `{"token_ids": int [b, l], "padding_mask": bool [b, l]}` and returns
    `[b, output_dim]`.

    Args:
        vocabulary_size: rows of the token embedding (the tokenizer's size).
        hidden_dim, num_layers, num_heads, intermediate_dim: transformer sizes.
        max_sequence_length: rows of the position embedding.
        dropout: dropout in the embeddings and every transformer layer.
        pooling: `"mean"`, `"max"`, `"first"`, `"attention"`, or a list of
            them, concatenated and projected to `pooled_dim` (seed 004).
        pooled_dim: projection size for a list of poolings.
        normalize: L2-normalize the output.
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
        super().__init__(**kwargs)
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim={hidden_dim} is not divisible by num_heads={num_heads}.")
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.dropout = dropout
        self.activation = activation
        self.pooling_spec = pooling if isinstance(pooling, str) else tuple(pooling)
        self.pooled_dim = pooled_dim
        self.normalize = normalize
        self.layer_norm_epsilon = layer_norm_epsilon

        self.embeddings = keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size, max_sequence_length, hidden_dim, name="embeddings"
        )
        self.embeddings_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="embeddings_norm")
        self.embeddings_dropout = keras.layers.Dropout(dropout, name="embeddings_dropout")
        self.transformer_layers = [
            keras_hub.layers.TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        # TensorFlow checkpoints do not follow Keras' list attributes: name each
        # layer too, or non-trained copies (EMA teacher, momentum encoder) lose
        # their transformer weights on restore.
        for layer in self.transformer_layers:
            setattr(self, layer.name, layer)
        self.pooling = make_pooling(self.pooling_spec, pooled_dim)

    @property
    def output_dim(self):
        return self.hidden_dim if isinstance(self.pooling_spec, str) else self.pooled_dim

    def build(self, inputs_shape):
        ids_shape = tuple(inputs_shape["token_ids"])
        hidden_shape = ids_shape + (self.hidden_dim,)
        self.embeddings.build(ids_shape)
        self.embeddings_norm.build(hidden_shape)
        for layer in self.transformer_layers:
            layer.build(hidden_shape)
        self.pooling.build(hidden_shape, ids_shape)
        self.built = True

    def call(self, inputs, training=False):
        token_ids, mask = inputs["token_ids"], inputs["padding_mask"]
        x = self.embeddings(token_ids)
        x = self.embeddings_dropout(self.embeddings_norm(x), training=training)
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=mask, training=training)
        # Float32 out under mixed precision: losses and exports want full-precision vectors.
        pooled = ops.cast(self.pooling(x, mask), "float32")
        if self.normalize:
            pooled = l2_normalize(pooled)
        return pooled

    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size,
            hidden_dim=self.hidden_dim,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            intermediate_dim=self.intermediate_dim,
            max_sequence_length=self.max_sequence_length,
            dropout=self.dropout,
            activation=self.activation,
            pooling=self.pooling_spec if isinstance(self.pooling_spec, str) else list(self.pooling_spec),
            pooled_dim=self.pooled_dim,
            normalize=self.normalize,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config


TOKEN_SHAPES = {"token_ids": (None, None), "padding_mask": (None, None)}


def ensure_built(encoder):
    """Creates the weights of a tokens -> vectors model that has none yet; returns it."""
    if not encoder.built:
        encoder.build(TOKEN_SHAPES)
    return encoder


def l2_normalize(x, epsilon=1e-12):
    """Unit vectors along the last axis; a zero vector stays finite."""
    x = ops.cast(x, "float32")
    return x / ops.sqrt(ops.maximum(ops.sum(x * x, axis=-1, keepdims=True), epsilon))
