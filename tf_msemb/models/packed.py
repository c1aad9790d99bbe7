"""Inference over packed tokens: a transformer encoder run on the real tokens only.

Projections, feed-forward layers and layer norms act on each token alone, and
they are nearly all of a small encoder's work. `PackedEncoder` keeps a batch's
tokens as one `[tokens, d]` matrix (the ragged ids' flat values), so none of
that work is spent on padding and every matmul is a single large 2-D one;
only attention lays the tokens out on a padded `[b, l]` grid and gathers them
back. Query, key and value projections are fused into one matmul, layer norms
use the fused batch-norm kernel (channels = tokens), and pooling works on
segments. Same vectors as the Keras forward pass (float32: within 1e-5).

It reads the weights of a built `SentenceEncoder` or of a `BackboneEncoder`
around a keras-hub `BertBackbone` (MiniLM, LaBSE-style BERTs); `packed_support`
says why any other encoder cannot be packed. Inference only: no dropout.

With a `compute_dtype` other than float32, the matmul weights are cast once,
when the `PackedEncoder` is made, into variables of their own (the cast per
call cost 14 % of bfloat16 encoding time); embeddings, residual sums, layer
norms and pooling stay float32.
"""

import math

import keras
import keras_hub
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.models.pretrained import BackboneEncoder

ACTIVATIONS = {
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "keras_hub>gelu_approximate": lambda x: tf.nn.gelu(x, approximate=True),
    "relu": tf.nn.relu,
}
POOLINGS = ("mean", "max", "first")


def _activation_name(function):
    name = keras.activations.serialize(function)
    return name.get("config") if isinstance(name, dict) else name


def _parts(encoder):
    """(token table, position table, constant row or None, embedding norm, transformer layers)."""
    if isinstance(encoder, SentenceEncoder):
        embeddings = encoder.embeddings
        return (embeddings.token_embedding.embeddings, embeddings.position_embedding.position_embeddings, None,
                encoder.embeddings_norm, encoder.transformer_layers)
    backbone = encoder.backbone
    # BERT's segment ids are all zero here (see BackboneEncoder): its segment embedding is one constant row.
    return (backbone.token_embedding.embeddings, backbone.position_embedding.position_embeddings,
            backbone.segment_embedding.embeddings[0], backbone.embeddings_layer_norm, backbone.transformer_layers)


def packed_support(encoder):
    """None when `encoder` can run packed, else the reason it cannot (for a log line)."""
    if isinstance(encoder, BackboneEncoder):
        if not isinstance(encoder.backbone, keras_hub.models.BertBackbone):
            return f"{type(encoder.backbone).__name__} is not a BertBackbone"
    elif not isinstance(encoder, SentenceEncoder):
        return f"{type(encoder).__name__} is neither a SentenceEncoder nor a BackboneEncoder"
    if encoder.pooling_spec not in POOLINGS:
        return f"pooling {encoder.pooling_spec!r} is not one of {', '.join(POOLINGS)}"
    for layer in _parts(encoder)[-1]:
        if layer.normalize_first:
            return f"{layer.name} normalizes first (pre-LN); packing follows post-LN BERT layers"
        activation = _activation_name(layer.activation)
        if activation not in ACTIVATIONS:
            return f"{layer.name} uses activation {activation!r}, not one of {', '.join(ACTIVATIONS)}"
    return None


def _norm(layer):
    """A `LayerNormalization`'s (gamma, beta, epsilon)."""
    return (layer.gamma, layer.beta, layer.epsilon)


def _layer_norm(x, norm):
    """Layer norm of `[tokens, d]` as a fused batch norm over `[1, tokens, d, 1]` NCHW (one channel per token)."""
    gamma, beta, epsilon = norm
    tokens = tf.shape(x)[0]
    y, *_ = tf.raw_ops.FusedBatchNormV3(
        x=tf.reshape(x, [1, tokens, -1, 1]), scale=tf.ones([tokens]), offset=tf.zeros([tokens]),
        mean=tf.zeros([0]), variance=tf.zeros([0]), epsilon=epsilon, data_format="NCHW", is_training=True)
    return tf.reshape(y, tf.shape(x)) * gamma + beta


class _Dense(tf.Module):
    """`x @ kernel + bias`, the kernels' first `input_axes` axes flattened into rows and the kernels concatenated.

    Cast once to `compute_dtype` when that is not float32.
    """

    def __init__(self, kernels, biases, compute_dtype, input_axes=1):
        super().__init__()
        self.kernels, self.biases, self.compute_dtype = kernels, biases, compute_dtype
        self.input_width = math.prod(kernels[0].shape[:input_axes])
        self.cast_kernel = None
        if compute_dtype != tf.float32:
            self.cast_kernel = tf.Variable(tf.cast(self._kernel(), compute_dtype), trainable=False)

    def _kernel(self):
        return tf.concat([tf.reshape(k, [self.input_width, -1]) for k in self.kernels], axis=1)

    def __call__(self, x):
        kernel = self._kernel() if self.cast_kernel is None else self.cast_kernel
        y = tf.matmul(tf.cast(x, self.compute_dtype), kernel)
        return tf.nn.bias_add(y, tf.cast(tf.concat([tf.reshape(b, [-1]) for b in self.biases], 0), y.dtype))


class PackedEncoder(tf.Module):
    """Ragged token ids `[b, (l)]` -> `[b, d]` float32, the same function as `encoder` at inference.

    Args:
        encoder: a built encoder for which `packed_support` returns None.
        compute_dtype: dtype of matmuls and attention (`"float32"` or `"bfloat16"`).
    """

    def __init__(self, encoder, compute_dtype="float32", name=None):
        super().__init__(name=name)
        reason = packed_support(encoder)
        if reason:
            raise ValueError(f"Cannot pack this encoder: {reason}.")
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.token_table, self.position_table, self.constant_row, embeddings_norm, transformer_layers = _parts(encoder)
        self.embeddings_norm = _norm(embeddings_norm)
        self.pooling = encoder.pooling_spec
        self.normalize = encoder.normalize
        self.layers = [self._layer(layer) for layer in transformer_layers]

    def _dense(self, *layers, input_axes=1):
        return _Dense([layer.kernel for layer in layers], [layer.bias for layer in layers], self.compute_dtype,
                      input_axes)

    def _layer(self, layer):
        """The weights of one keras-hub `TransformerEncoder` (post-LN: Vaswani et al. 2017, Sec. 3.1)."""
        attention = layer._self_attention_layer
        return {
            "heads": attention._num_heads,
            "qkv": self._dense(attention._query_dense, attention._key_dense, attention._value_dense),
            "attention_output": self._dense(attention._output_dense, input_axes=2),
            "attention_norm": _norm(layer._self_attention_layer_norm),
            "intermediate": self._dense(layer._feedforward_intermediate_dense),
            "activation": ACTIVATIONS[_activation_name(layer.activation)],
            "output": self._dense(layer._feedforward_output_dense),
            "output_norm": _norm(layer._feedforward_layer_norm),
        }

    def _attention(self, qkv, layer, row_splits, index, key_bias):
        """Scaled dot-product attention (Vaswani et al. 2017, Eq. 1) on the padded grid; packed `[tokens, d]` out."""
        grid = tf.RaggedTensor.from_row_splits(qkv, row_splits, validate=False).to_tensor()
        batch, length = tf.shape(grid)[0], tf.shape(grid)[1]
        heads, width = layer["heads"], qkv.shape[-1] // 3
        grid = tf.transpose(tf.reshape(grid, [batch, length, 3, heads, width // heads]), [2, 0, 3, 1, 4])
        query = grid[0] * tf.cast(1.0 / math.sqrt(width // heads), qkv.dtype)
        scores = tf.matmul(query, grid[1], transpose_b=True) + key_bias
        context = tf.matmul(tf.nn.softmax(scores), grid[2])
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch, length, width])
        return tf.gather_nd(context, index)

    def __call__(self, ids):
        tokens = ids.flat_values
        rows = ids.value_rowids()
        positions = tf.range(tf.size(tokens, out_type=tf.int64)) - tf.gather(ids.row_starts(), rows)
        x = tf.gather(self.token_table, tokens) + tf.gather(self.position_table, positions)
        if self.constant_row is not None:
            x += self.constant_row
        x = _layer_norm(x, self.embeddings_norm)
        index = tf.stack([rows, positions], axis=1)
        very_negative = -3e4 if self.compute_dtype == tf.float16 else -1e9
        key_bias = tf.where(tf.sequence_mask(ids.row_lengths()), 0.0, very_negative)
        key_bias = tf.cast(key_bias, self.compute_dtype)[:, None, None, :]
        for layer in self.layers:
            qkv = layer["qkv"](x)
            attended = layer["attention_output"](self._attention(qkv, layer, ids.row_splits, index, key_bias))
            x = _layer_norm(x + tf.cast(attended, tf.float32), layer["attention_norm"])
            hidden = layer["output"](layer["activation"](layer["intermediate"](x)))
            x = _layer_norm(x + tf.cast(hidden, tf.float32), layer["output_norm"])
        pooled = self._pool(x, rows, ids)
        return l2_normalize(pooled) if self.normalize else pooled

    def _pool(self, x, rows, ids):
        if self.pooling == "first":
            return tf.gather(x, ids.row_starts())
        if self.pooling == "max":
            return tf.math.unsorted_segment_max(x, rows, ids.nrows())
        return tf.math.unsorted_segment_mean(x, rows, ids.nrows())
