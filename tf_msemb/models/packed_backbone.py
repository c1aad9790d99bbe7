"""A transformer backbone run on packed tokens: the real tokens only, for inference and training.

Projections, feed-forward layers and layer norms act on each token alone, and
they are nearly all of a small encoder's work. `PackedBackbone` keeps a
batch's tokens as one `[tokens, d]` matrix (the ragged ids' flat values), so
none of that work is spent on padding and every matmul is a single large 2-D
one; only attention lays the tokens out on a padded `[b, l]` grid and gathers
them back. Query, key and value projections are fused into one matmul. The token
states equal the Keras forward pass's on every real token (float32: within
1e-5); every op has a gradient, so training runs through it too
(`Embedder.packed_training`).

It reads the weights of a keras-hub `BertBackbone` (MiniLM, LaBSE-style
BERTs), `RobertaBackbone` / `XLMRobertaBackbone`, `DistilBertBackbone` (and
the `hf_checkpoint` subclasses of each) or our `TransformerBackbone`;
`backbone_support` says why any other backbone cannot be packed.

Positions count from 0 in every sentence, as the backbones' position
embeddings do: keras-hub's RoBERTa / XLM-R converter drops Hugging Face's two
reserved rows (RoBERTa's positions start after its padding id) and folds the
single token-type row into the position table, and DistilBERT has no token
types; BERT adds its segment table's first row (the `Embedder` feeds
segment 0).

Keras' `MultiHeadAttention` is read through its public properties; keras-hub's
`TransformerEncoder` has no public accessors for its sublayers, so
`ENCODER_SUBLAYERS` names the private attributes read, the only ones.
`backbone_support` reads everything once and checks that each transformer
layer holds exactly the weights read: a keras-hub or Keras release that
renames or adds a part makes packing decline (callers fall back to padded
batches) instead of failing.

Training applies dropout where keras-hub's layers do (embeddings after their
layer norm, attention probabilities, each block's output before its residual
sum), through those `Dropout` layers' rates and seed generators: their seed
states are the ones that checkpoints keep and that the trainer decorrelates
across replicas. Keras' `MultiHeadAttention` keeps its probabilities'
dropout in the private `_dropout_layer`, also read.
"""

import functools
import math
from typing import NamedTuple

import keras
import keras_hub
import tensorflow as tf
from absl import logging

try:
    from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
except ImportError:  # a TensorFlow release that moved it: `in_xla_context` says "XLA" (see there)
    GraphOrParentsInXlaContext = None

from tf_msemb.models.backbone import TransformerBackbone


@tf.custom_gradient
def _gelu(x):
    """Exact GELU, `x * Phi(x)` (Hendrycks & Gimpel 2016), with `Phi` kept for the gradient `Phi(x) + x * phi(x)`.

    `Phi(x) = (1 + erf(x / sqrt(2))) / 2`: TensorFlow's CPU `Erf` is vectorized and `Erfc` (what
    `tf.nn.gelu(approximate=False)` calls) is not; `Erfc` took 28 % of bfloat16 encoding time, `Erf` takes a
    third of its time in float32 and a fifth in bfloat16. The two differ by float rounding (absolute, under
    1e-7 in float32). `tf.nn.gelu`'s differentiated graph also recomputes `Phi`.
    """
    cdf = 0.5 + 0.5 * tf.math.erf(x * tf.cast(1 / math.sqrt(2), x.dtype))

    def gradient(upstream):
        return upstream * (cdf + x * (tf.exp(-0.5 * tf.square(x)) * tf.cast(1 / math.sqrt(2 * math.pi), x.dtype)))

    return x * cdf, gradient


def _gelu_inference(x):
    """Exact GELU written as `0.5 * x * (1 + erf(x / sqrt(2)))`, a form TensorFlow's oneDNN remapper fuses into the
    matmul before it (one pass fewer per layer: bfloat16 encoding 90 -> 84 ms a batch of 64); no custom gradient,
    which would hide the pattern."""
    return 0.5 * x * (1.0 + tf.math.erf(x * tf.cast(1 / math.sqrt(2), x.dtype)))


ACTIVATIONS = {
    "gelu": _gelu_inference,
    "keras_hub>gelu_approximate": lambda x: tf.nn.gelu(x, approximate=True),
    "relu": tf.nn.relu,
}
# What training differentiates instead (the same function).
TRAINING_ACTIVATIONS = {"gelu": _gelu}


def _activation(name, training):
    """The function of activation `name`: its training form, where it has one, when `training`."""
    return (training and TRAINING_ACTIVATIONS.get(name)) or ACTIVATIONS[name]
BACKBONES = (keras_hub.models.BertBackbone, keras_hub.models.RobertaBackbone, keras_hub.models.DistilBertBackbone,
             TransformerBackbone)  # XLMRobertaBackbone is a RobertaBackbone
# A keras-hub `TransformerEncoder`'s sublayers by role, and the private attribute that holds each.
ENCODER_SUBLAYERS = {
    "attention": "_self_attention_layer",
    "attention_norm": "_self_attention_layer_norm",
    "attention_dropout": "_self_attention_dropout",
    "intermediate": "_feedforward_intermediate_dense",
    "output": "_feedforward_output_dense",
    "output_dropout": "_feedforward_dropout",
    "output_norm": "_feedforward_layer_norm",
}
DENSE_ROLES = ("query", "key", "value", "attention_output", "intermediate", "output")
# The `PackedDense`s of a packed layer (query, key and value fused into one).
LAYER_DENSES = ("qkv", "attention_output", "intermediate", "output")
NORM_ROLES = ("attention_norm", "output_norm")
# Token count from which oneDNN's layer norm (`inference.onednn.layer_norm`) beats elementwise ops at MiniLM's width (384), a call each: oneDNN 0.52
# and elementwise 0.58 ms at 256 rows, 0.56 and 0.31 ms at 64 at TensorFlow's default intra-op threads (at 1, a
# 500-row call takes about 0.08 ms: most of the 0.5 ms is waiting for the intra-op pool).
FUSED_NORM_MIN_TOKENS = 256


def _activation_name(function):
    name = keras.activations.serialize(function)
    return name.get("config") if isinstance(name, dict) else name


def _dense(layer):
    """A dense or einsum-dense layer's (kernel, bias)."""
    return (layer.kernel, layer.bias)


def _norm(layer):
    """A `LayerNormalization`'s (gamma, beta, epsilon)."""
    return (layer.gamma, layer.beta, layer.epsilon)


def _read_layer(layer):
    """One keras-hub `TransformerEncoder` as packing reads it: weights by role, head count, activation, LN placement,
    dropout rates."""
    sublayers = {role: getattr(layer, name) for role, name in ENCODER_SUBLAYERS.items()}
    attention = sublayers["attention"]
    return {
        "heads": attention.num_heads,
        "query": _dense(attention.query_dense),
        "key": _dense(attention.key_dense),
        "value": _dense(attention.value_dense),
        "attention_output": _dense(attention.output_dense),
        "attention_norm": _norm(sublayers["attention_norm"]),
        "intermediate": _dense(sublayers["intermediate"]),
        "output": _dense(sublayers["output"]),
        "output_norm": _norm(sublayers["output_norm"]),
        "activation": _activation_name(layer.activation),
        "normalize_first": layer.normalize_first,
        "dropout": {"probabilities": attention._dropout_layer, "attention": sublayers["attention_dropout"],
                    "output": sublayers["output_dropout"]},
    }


def _position_embedding(backbone):
    """BERT's and `TransformerBackbone`'s `position_embedding`, else the one inside `embeddings` (RoBERTa, XLM-R,
    DistilBERT: a `TokenAndPositionEmbedding`)."""
    if hasattr(backbone, "position_embedding"):
        return backbone.position_embedding
    return backbone.embeddings.position_embedding


def read_backbone(backbone):
    """The weights and rates packing reads from a BERT-layout backbone; AttributeError where one is not where
    expected."""
    # The `Embedder` feeds segment id 0: BERT's segment embedding adds its first row to every token.
    segments = backbone.segment_embedding.embeddings if "segment_ids" in backbone.input else None
    return {
        "token_table": backbone.token_embedding.embeddings,
        "position_table": _position_embedding(backbone).position_embeddings,
        "segment_table": segments,
        "constant_row": None if segments is None else segments[0],
        "embeddings_norm": _norm(backbone.embeddings_layer_norm),
        "embeddings_dropout": backbone.embeddings_dropout,
        "layers": [_read_layer(layer) for layer in backbone.transformer_layers],
    }


def _layer_variables(read):
    return [v for role in DENSE_ROLES for v in read[role]] + [v for role in NORM_ROLES for v in read[role][:2]]


def _holds_exactly(layer, read):
    """Whether the weights read are all of `layer`'s weights (no bias missing, no extra part such as a gate)."""
    return {id(v) for v in _layer_variables(read)} == {id(v) for v in layer.weights}


def _unread_weights(backbone, weights):
    """Paths of the backbone's weights that packing would not read (BERT's unused pooler aside)."""
    read = [weights["token_table"], weights["position_table"], *weights["embeddings_norm"][:2]]
    read += [weights["segment_table"]] if weights["segment_table"] is not None else []
    read += [v for layer in weights["layers"] for v in _layer_variables(layer)]
    pooler = getattr(backbone, "pooled_dense", None)
    ignored = {id(v) for v in pooler.weights} if pooler is not None else set()
    known = {id(v) for v in read} | ignored
    return [v.path for v in backbone.weights if id(v) not in known]


def read_supported(backbone):
    """`(weights, None)` when `backbone` can run packed, else `(None, the reason it cannot)`."""
    if not isinstance(backbone, BACKBONES):
        names = ", ".join(kind.__name__ for kind in BACKBONES)
        return None, f"{type(backbone).__name__} is not one of {names}"
    try:
        weights = read_backbone(backbone)
    except AttributeError as error:
        return None, f"its layers are not laid out as packing expects ({error})"
    for layer, read in zip(backbone.transformer_layers, weights["layers"]):
        if read["normalize_first"]:
            return None, f"{layer.name} normalizes first (pre-LN); packing follows post-LN BERT layers"
        if read["activation"] not in ACTIVATIONS:
            return None, f"{layer.name} uses activation {read['activation']!r}, not one of {', '.join(ACTIVATIONS)}"
        if not _holds_exactly(layer, read):
            return None, f"{layer.name} does not hold exactly the weights packing reads"
    if len({read["heads"] for read in weights["layers"]}) > 1:
        return None, "its layers have different head counts"
    unread = _unread_weights(backbone, weights)
    if unread:
        return None, f"packing would not read {', '.join(unread)}"
    return weights, None


def backbone_support(backbone):
    """None when `backbone` can run packed, else the reason it cannot (for a log line)."""
    return read_supported(backbone)[1]


def in_xla_context():
    """Whether the graph being built is compiled by XLA (`jit_compile`, TPUs): static shapes only, so no packing.

    TensorFlow has no public test for this (`tf.config.optimizer.get_jit` is
    the global auto-clustering setting, not `jit_compile`); the private
    `control_flow_util.GraphOrParentsInXlaContext` is the one its own ops use.
    Where a TensorFlow release lacks it (or the graph internals it reads),
    this answers True, with a warning once: packing inside XLA fails to
    compile, padded batches train the same model everywhere (only slower).
    """
    if GraphOrParentsInXlaContext is not None:
        try:
            return GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
        except AttributeError:
            pass
    _warn_xla_unknown()
    return True


@functools.cache
def _warn_xla_unknown():
    """Logs, once per process, that packed training is off because XLA compilation cannot be detected."""
    logging.warning("TensorFlow %s cannot tell whether a graph is XLA-compiled (its private control_flow_util."
                    "GraphOrParentsInXlaContext is missing or failed): packed training is off, batches train padded "
                    "(same results, slower).", tf.__version__)


def _layer_norm(x, norm, fused=None):
    """Layer norm of `[tokens, d]` over `d` (Ba et al. 2016, Eq. 4), with elementwise ops: forward and backward take
    a third of a fused batch norm's time with one channel per token (its CPU kernel transposes NCHW both ways).

    `fused` (traced inference only): a fused layer norm `(x, gamma, beta, epsilon)` run where `x` has at least
    `FUSED_NORM_MIN_TOKENS` rows.
    """
    gamma, beta, epsilon = norm

    def elementwise():
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + epsilon) * gamma + beta

    if fused is None or tf.executing_eagerly():
        return elementwise()
    return tf.cond(tf.shape(x)[0] >= FUSED_NORM_MIN_TOKENS, lambda: fused(x, gamma, beta, epsilon),
                   elementwise)


def _dropout(x, layer, training):
    """`layer`'s dropout of `x` (its rate and seed state), in `x`'s dtype (no mixed-precision cast)."""
    if not training or not layer.rate:
        return x
    return keras.random.dropout(x, layer.rate, noise_shape=layer.noise_shape, seed=layer.seed_generator)


def _residual(dense, inputs, x, dropout, training):
    """`x + dropout(dense(inputs))` in float32; where nothing drops, the dense adds `x` itself (int8 fuses the sum
    into its matmul)."""
    if training and dropout.rate:
        return x + tf.cast(_dropout(dense(inputs, training=training), dropout, training), tf.float32)
    return dense(inputs, residual=x, training=training)


class PackedDense(tf.Module):
    """`activation(x @ kernel + bias) [+ residual]`, the kernels' first `input_axes` axes flattened into rows and the
    kernels concatenated.

    In `compute_dtype`; a `residual` is added in float32. With `frozen_cast`
    (inference with a compute dtype other than float32) the cast kernel is a
    variable made once, here; otherwise the kernel is read (and cast) from the
    weights on every call, so gradients reach them. `activation`: a name in
    `ACTIVATIONS`, or None.
    """

    def __init__(self, kernels, biases, compute_dtype, input_axes=1, frozen_cast=False, activation=None):
        super().__init__()
        self.kernels, self.biases, self.compute_dtype = kernels, biases, compute_dtype
        self.input_width = math.prod(kernels[0].shape[:input_axes])
        self.activation = activation
        self.cast_kernel = None
        if frozen_cast and compute_dtype != tf.float32:
            self.cast_kernel = tf.Variable(tf.cast(self._kernel(), compute_dtype), trainable=False)

    def _kernel(self, dtype=None):
        kernel = tf.concat([tf.reshape(k, [self.input_width, -1]) for k in self.kernels], axis=1)
        return tf.cast(kernel, dtype or self.compute_dtype)

    def _bias(self):
        return tf.concat([tf.reshape(b, [-1]) for b in self.biases], 0)

    def float_weights(self):
        """The float32 `(kernel [input_width, units], bias [units])` this layer applies (int8 export reads them)."""
        return self._kernel(tf.float32), tf.cast(self._bias(), tf.float32)

    def __call__(self, x, residual=None, training=False):
        kernel = self._kernel() if self.cast_kernel is None else self.cast_kernel
        y = tf.matmul(tf.cast(x, self.compute_dtype), kernel)
        y = tf.nn.bias_add(y, tf.cast(self._bias(), y.dtype))
        if self.activation:
            y = _activation(self.activation, training)(y)
        return y if residual is None else residual + tf.cast(y, tf.float32)


class AttentionGroup(NamedTuple):
    """Sentences whose attention runs on one padded grid of `length` positions, their tokens contiguous in the token
    matrix; indices into it for both layouts `PackedBackbone._attention` uses.

    `cells`: `[sentences, length]`, the token matrix row at each grid cell;
    cells past a sentence's end repeat its last token (masked as keys, never
    read back). `token_cells`: `[tokens]`, each token's cell in the
    `[sentences * length]` grid. `grid_rows`: `[sentences, heads, length]`,
    the row of the projections seen as `[tokens * 3 * heads, d / heads]` that
    holds each cell's query (its key is `heads` rows on, its value `2 *
    heads`); `token_rows`: `[tokens, heads]`, each token's row in the
    `[sentences * heads * length, d / heads]` attention output. `key_bias`:
    `[sentences, 1, 1, length]`, 0 on real keys, very negative on padding.
    """

    cells: tf.Tensor
    token_cells: tf.Tensor
    grid_rows: tf.Tensor
    token_rows: tf.Tensor
    key_bias: tf.Tensor

    @classmethod
    def of(cls, ids, compute_dtype, heads, first_token=0):
        """The group of the sentences of ragged `ids` (their first token at row `first_token` of the token matrix),
        with a `compute_dtype` key bias."""
        starts, lengths = tf.cast(ids.row_starts(), tf.int32), tf.cast(ids.row_lengths(), tf.int32)
        length = tf.maximum(tf.reduce_max(lengths), 0)  # 0 for a group without sentences
        last = tf.maximum(lengths - 1, 0)
        cells = first_token + starts[:, None] + tf.minimum(tf.range(length), last[:, None])
        rows, head, position = tf.cast(ids.value_rowids(), tf.int32), tf.range(heads), positions(ids)
        token_cells = rows * length + position
        grid_rows = cells[:, None, :] * (3 * heads) + head[None, :, None]
        token_rows = (rows[:, None] * heads + head) * length + position[:, None]
        very_negative = -3e4 if compute_dtype == tf.float16 else -1e9
        key_bias = tf.where(tf.sequence_mask(lengths, length), 0.0, very_negative)
        return cls(cells, token_cells, grid_rows, token_rows, tf.cast(key_bias, compute_dtype)[:, None, None, :])


def positions(ids):
    """Each token's position in its sentence (int32), in the flat order of ragged `ids`."""
    rows = tf.cast(ids.value_rowids(), tf.int32)
    return tf.range(tf.size(ids.flat_values, out_type=tf.int32)) - tf.gather(tf.cast(ids.row_starts(), tf.int32), rows)


class PackedBackbone(tf.Module):
    """Ragged token ids `[b, (l)]` -> float32 token states `[tokens, d]` (the ids' flat order).

    Args:
        weights: what `read_supported` returned for the backbone.
        compute_dtype: dtype of matmuls and attention (`float32` or `bfloat16`);
            embeddings, residual sums and layer norms stay float32.
        frozen_cast: see `PackedDense` (inference only).
        attention_groups: attention runs on this many padded grids of the
            sentences sorted by length. The sums are the same (a sentence
            attends to its own tokens only), but a batch of mixed lengths
            scores less padding: a grid holds `b * l^2` scores. The token
            matrix is put in that order once, before the embeddings, and
            back after the last layer: token-wise work does not care.
        fused_norm: inference layer norms of large batches run on this
            function `(x, gamma, beta, epsilon)` (`_layer_norm`), e.g.
            oneDNN's kernel (`inference.onednn.layer_norm`), whose graph
            needs oneDNN's ops as int8 ones do; None: elementwise ops.
        attention_dtype: dtype attention runs in, if not `compute_dtype`
            (int8 exports: bfloat16, which their query-key-value matmul writes).
    """

    def __init__(self, weights, compute_dtype="float32", frozen_cast=False, attention_groups=1, fused_norm=None,
                 attention_dtype=None, name=None):
        super().__init__(name=name)
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.attention_dtype = tf.as_dtype(attention_dtype or compute_dtype)
        self.frozen_cast = frozen_cast
        self.attention_groups = attention_groups
        self.fused_norm = fused_norm
        self.token_table, self.position_table = weights["token_table"], weights["position_table"]
        self.constant_row = weights["constant_row"]
        self.embeddings_norm = weights["embeddings_norm"]
        self.embeddings_dropout = weights["embeddings_dropout"]
        self.layers = [self._layer(layer) for layer in weights["layers"]]

    def dense(self, *weights, input_axes=1, activation=None):
        """One `PackedDense` of the `(kernel, bias)` pairs `weights`, side by side."""
        return PackedDense([kernel for kernel, _ in weights], [bias for _, bias in weights], self.compute_dtype,
                           input_axes, self.frozen_cast, activation)

    def _layer(self, read):
        """One transformer layer (post-LN: Vaswani et al. 2017, Sec. 3.1), from what `_read_layer` read."""
        return {
            "heads": read["heads"],
            "qkv": self.dense(read["query"], read["key"], read["value"]),
            "attention_output": self.dense(read["attention_output"], input_axes=2),
            "attention_norm": read["attention_norm"],
            "intermediate": self.dense(read["intermediate"], activation=read["activation"]),
            "output": self.dense(read["output"]),
            "output_norm": read["output_norm"],
            "dropout": read["dropout"],
        }

    def replace_layer_denses(self, function):
        """Puts `function([dense of each of LAYER_DENSES])` in their places, in every layer (int8 calibration and
        export)."""
        for layer in self.layers:
            denses = function([layer[role] for role in LAYER_DENSES])
            layer.update(zip(LAYER_DENSES, denses))

    def _attention(self, qkv, layer, group, training):
        """Scaled dot-product attention (Vaswani et al. 2017, Eq. 1) on one `AttentionGroup`'s grid, from the batch's
        `[tokens, 3d]` projections; the `[tokens, d]` out of the group's tokens.

        Inference gathers each head's rows onto the grid and back (no transpose: int8 MiniLM encoding +8 %);
        training gathers whole token rows and transposes, as the gradient of a gather of `d / heads`-wide rows
        (a segment sum over them) made a step 7 % slower.
        """
        heads, width = layer["heads"], qkv.shape[-1] // 3
        if training:
            batch, length = tf.shape(group.cells)[0], tf.shape(group.cells)[1]
            grid = tf.reshape(tf.gather(qkv, group.cells), [batch, length, 3, heads, width // heads])
            # Unstacked, not indexed: each index's gradient (StridedSliceGrad) writes a zero-filled copy of the
            # whole grid on one thread, a fifth of a MiniLM training step; unstack's gradient is one stack.
            query, key, value = tf.unstack(tf.transpose(grid, [2, 0, 3, 1, 4]), num=3)
        else:
            rows = tf.reshape(qkv, [-1, width // heads])
            query, key, value = (tf.gather(rows, group.grid_rows + part * heads) for part in range(3))
        query *= tf.cast(1.0 / math.sqrt(width // heads), qkv.dtype)
        scores = tf.matmul(query, key, transpose_b=True) + group.key_bias
        probabilities = _dropout(tf.nn.softmax(scores), layer["dropout"]["probabilities"], training)
        context = tf.matmul(probabilities, value)
        if training:
            return tf.gather(tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, width]), group.token_cells)
        return tf.reshape(tf.gather(tf.reshape(context, [-1, width // heads]), group.token_rows), [-1, width])

    def _by_length(self, ids):
        """`ids` with its sentences sorted by length (stable) and the permutation from their tokens back to the
        flat order of `ids`; `(ids, None)` for one attention group."""
        if self.attention_groups == 1:
            return ids, None
        order = tf.argsort(ids.row_lengths(), stable=True)
        flat_positions = tf.RaggedTensor.from_row_splits(tf.range(ids.row_splits[-1]), ids.row_splits, validate=False)
        return tf.gather(ids, order), tf.math.invert_permutation(tf.gather(flat_positions, order).flat_values)

    def _attention_groups(self, ids):
        """The `AttentionGroup`s of length-sorted `ids`."""
        heads = self.layers[0]["heads"] if self.layers else 1
        if self.attention_groups == 1:
            return [AttentionGroup.of(ids, self.attention_dtype, heads)]
        batch, count = ids.nrows(out_type=tf.int32), self.attention_groups
        bounds = [batch * g // count for g in range(count + 1)]
        return [AttentionGroup.of(ids[start:end], self.attention_dtype, heads, tf.cast(ids.row_splits[start], tf.int32))
                for start, end in zip(bounds, bounds[1:])]

    def encode_one(self, tokens):
        """Inference on one sentence's token ids `[l]` -> float32 token states `[l, d]`: `__call__` on a batch of
        that sentence alone (float32: within 1e-5), in a fraction of its ops.

        A batch of one needs no grid indices, key mask or reordering: attention runs on `[heads, l, l]` from a
        reshape and a transpose of the projections, in float32 (a few hundred scores; batches of int8 and
        bfloat16 exports run it in bfloat16). Layer norms are elementwise: oneDNN's kernel waits for the
        intra-op pool (int8 MiniLM at TensorFlow's default threads, one sentence in TF Serving's Session: p50
        10.3 ms with it).
        """
        length = tf.size(tokens)
        x = tf.gather(self.token_table, tokens) + self.position_table[:length]
        if self.constant_row is not None:
            x += self.constant_row
        x = _layer_norm(x, self.embeddings_norm)
        for layer in self.layers:
            heads, width = layer["heads"], x.shape[-1]
            qkv = tf.cast(layer["qkv"](x), tf.float32)
            grid = tf.transpose(tf.reshape(qkv, [length, 3 * heads, width // heads]), [1, 0, 2])
            query, key, value = tf.split(grid, 3)
            query *= tf.cast(1.0 / math.sqrt(width // heads), qkv.dtype)
            context = tf.matmul(tf.nn.softmax(tf.matmul(query, key, transpose_b=True)), value)
            attended = tf.reshape(tf.transpose(context, [1, 0, 2]), [length, width])
            x = _layer_norm(layer["attention_output"](attended, residual=x), layer["attention_norm"])
            x = _layer_norm(layer["output"](layer["intermediate"](x), residual=x), layer["output_norm"])
        return x

    def sorted_input(self, ids):
        """`(ids sorted by length, the permutation back to their flat order or None, their AttentionGroups)`: what
        `embed` and `run_layer` take."""
        ids, back = self._by_length(ids)
        return ids, back, self._attention_groups(ids)

    def embed(self, ids, training=False):
        """The token states `[tokens, d]` that enter the first layer: token + position embeddings, normalized."""
        x = tf.gather(self.token_table, ids.flat_values) + tf.gather(self.position_table, positions(ids))
        if self.constant_row is not None:
            x += self.constant_row
        return _dropout(_layer_norm(x, self.embeddings_norm, None if training else self.fused_norm),
                        self.embeddings_dropout, training)

    def run_layer(self, layer, x, groups, training=False):
        """One transformer layer (`self.layers[i]`, or one standing in for it) on the token states `x` of the
        sentences of `groups`."""
        fused = None if training else self.fused_norm
        qkv = tf.cast(layer["qkv"](x), self.attention_dtype)
        attended = [self._attention(qkv, layer, group, training) for group in groups]
        attended = attended[0] if len(groups) == 1 else tf.concat(attended, axis=0)
        x = _layer_norm(_residual(layer["attention_output"], attended, x, layer["dropout"]["attention"], training),
                        layer["attention_norm"], fused)
        hidden = layer["intermediate"](x, training=training)
        return _layer_norm(_residual(layer["output"], hidden, x, layer["dropout"]["output"], training),
                           layer["output_norm"], fused)

    def __call__(self, ids, training=False, sorted_by_length=False):
        """`sorted_by_length`: the caller has sorted `ids` (shortest first), so they are not sorted again."""
        ids, back = (ids, None) if sorted_by_length else self._by_length(ids)
        x = self.embed(ids, training)
        groups = self._attention_groups(ids)
        for layer in self.layers:
            x = self.run_layer(layer, x, groups, training)
        return x if back is None else tf.gather(x, back)
