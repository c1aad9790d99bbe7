"""`TransformerBackbone`: the from-scratch transformer, a keras-hub backbone like BERT."""

import keras
import keras_hub


@keras.saving.register_keras_serializable(package="tf_msemb")
class TransformerBackbone(keras_hub.models.Backbone):
    """Token and position embeddings, a layer norm, then post-LN transformer layers (Vaswani et al. 2017).

    Takes `{"token_ids": int [b, l], "padding_mask": [b, l]}` and returns the
    token states `[b, l, hidden_dim]`. Laid out like keras-hub's
    `DistilBertBackbone`, with `token_embedding`, `position_embedding`,
    `embeddings_layer_norm` and `transformer_layers` named as in `BertBackbone`.

    Args:
        vocabulary_size: rows of the token embedding (the tokenizer's size).
        hidden_dim, num_layers, num_heads, intermediate_dim: transformer sizes.
        max_sequence_length: rows of the position embedding.
        dropout: dropout in the embeddings and every transformer layer.
        activation: of the feed-forward layers.
        layer_norm_epsilon: of every layer norm.
    """

    # The constructor's arguments, as they appear in the config.
    ARGUMENTS = ("vocabulary_size", "hidden_dim", "num_layers", "num_heads", "intermediate_dim",
                 "max_sequence_length", "dropout", "activation", "layer_norm_epsilon")

    def __init__(self, vocabulary_size, hidden_dim, num_layers, num_heads, intermediate_dim, max_sequence_length,
                 dropout=0.1, activation="gelu", layer_norm_epsilon=1e-5, dtype=None, **kwargs):
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim={hidden_dim} is not divisible by num_heads={num_heads}.")
        self.embeddings = keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size, max_sequence_length, hidden_dim, dtype=dtype, name="embeddings"
        )
        self.token_embedding = self.embeddings.token_embedding
        self.position_embedding = self.embeddings.position_embedding
        self.embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_norm"
        )
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        self.transformer_layers = [
            keras_hub.layers.TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]

        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embeddings_dropout(self.embeddings_layer_norm(self.embeddings(token_ids)))
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=padding_mask)
        super().__init__(inputs={"token_ids": token_ids, "padding_mask": padding_mask}, outputs=x, dtype=dtype,
                         **kwargs)

        # TensorFlow checkpoints do not follow Keras' list attributes: without
        # a name of its own, a transformer layer is saved under its position in
        # the functional graph (`_operations/9`). Name each one.
        for layer in self.transformer_layers:
            setattr(self, layer.name, layer)
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.dropout = dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self.ARGUMENTS})
        return config
