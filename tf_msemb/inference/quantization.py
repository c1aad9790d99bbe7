"""int8 inference: a packed backbone's matmuls on 8-bit integers, calibrated on the user's own sentences.

Each of a layer's four matmuls (`LAYER_DENSES`) becomes an `Int8Dense`:
unsigned 8-bit activations on one calibrated range per tensor, signed 8-bit
weights with one scale per output column (where the CPU has no VNNI also
keeping each pair of adjacent rows within 128 levels: `tf_msemb.cpus`),
32-bit integer sums dequantized in the same op. Attention runs in bfloat16 where oneDNN has bfloat16 kernels (AVX-512),
which the query-key-value matmul writes, else in float32; embeddings, layer
norms and pooling stay float32.

The op is TensorFlow's `_QuantizedMatMul`, the one its oneDNN kernels run for
int8 graphs (Intel Neural Compressor's exports are made of it); oneDNN's
`_MklQuantizeV2` makes its inputs. Both are in every TensorFlow build with
oneDNN (the x86-64 pip wheels), on by default on Linux CPUs with AVX512-VNNI, AVX512-BF16,
AVX-VNNI or AMX and otherwise with `TF_ENABLE_ONEDNN_OPTS=1`;
`tf_msemb.inference.packed.int8_support` says whether this process runs an
int8 graph.
It has no Python wrapper (`tf_msemb.inference.onednn` adds it to the graph
being traced): call `Int8Dense` inside a `tf.function`. It fuses what
follows the sum, each saving a pass over the layer's activations: the bias,
the weight columns' scales, GELU, the residual sum and the next matmul's
quantization (`output_range`); it keeps the weights reordered for the CPU
between calls (`is_weight_const`), one copy per matmul.

Outlier channels are what break per-tensor activation ranges in BERT-family
encoders: SmoothQuant (Xiao et al. 2023, Sec. 4, Eq. 4) divides input channel
`j` by `s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)` and multiplies the
weight's row `j` by it, which leaves the product unchanged and moves the
range from activations to weights. It is applied where the paper applies it
(Sec. 5, Fig. 6: the inputs of the query-key-value and first feed-forward
matmuls, here a multiply after the layer norm) and to the attention output's
input, folded into the value columns (attention is linear in the values); the
second feed-forward matmul takes the quantized GELU output as the first one
writes it. No multiply can be folded in there (GELU is not linear), and a
single channel of it can span a range many times its neighbours' (in
multilingual-e5-small's layer 4, 69.8 against at most 5.2: that matmul's
output fell to cosine 0.79 of float32's on one shared range). Such outlier
channels stay in float32, as LLM.int8() keeps outlier features out of its
int8 matmuls (Dettmers et al. 2022, Sec. 3.2): the first matmul computes
their columns apart and the second multiplies them by their kernel rows and
adds the product to its residual (`outlier_channels`), so the other
channels share a range as narrow as theirs.

What is left of a layer's error is mostly that GELU output's one range: a
token's greatest value is typically a third of the tensor's (2 against 5.5
in multilingual-e5-small), so most tokens get a third of the 255 levels.
`per_token` quantizes it on a scale per token instead, the token's own
greatest value, as dynamic per-token activation quantization does
(ZeroQuant, Yao et al. 2022, Sec. 4.1): the first matmul writes it in
float32, each row is divided by its scale and quantized on one fixed range,
`PER_TOKEN_RANGE`, and the second matmul multiplies each row of its
integer product back (the per-token tensor's `row_scale`).
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tf_msemb.cpus import this_cpu
from tf_msemb.inference.onednn import quantize
from tf_msemb.inference.onednn import quantized_matmul
from tf_msemb.models.packed_backbone import ACTIVATIONS

DEFAULT_SMOOTHING = 0.8
DEFAULT_OUTLIER_CHANNELS = 4
OUTLIER_GAP = 2.0  # an outlier channel's range is at least this many times the widest one left in int8
_TINY = 1e-8  # floor for scales of channels or columns that are all zero
# The fixed range a per-token row `y / row_scale` is quantized on: the scale is the row's greatest value, at
# least 4 times the calibrated floor's magnitude (GELU's -0.17), so every row fits with no shift of its own. A
# typical row (greatest value 2) uses 87 % of the levels.
PER_TOKEN_RANGE = (-0.25, 1.0)
# The oneDNN post-op of each packed activation name (`packed_backbone.ACTIVATIONS`, which the float32 outlier
# columns apply).
POST_OPS = {"gelu": "GeluExact", "keras_hub>gelu_approximate": "GeluApproximate", "relu": "Relu"}


def quantization_range(low, high):
    """The range `QuantizeV2` (MIN_FIRST) quantizes `[low, high]` on: widened to hold 0, at least 1 % wide."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    return low, max(high, low + max(1.0, abs(low), abs(high)) / 100)


def smoothing_factors(low, high, kernel, alpha):
    """SmoothQuant's `s_j` (Eq. 4) of each input channel, from its calibrated range and the kernel's row `j`."""
    channel_max = np.maximum(np.maximum(-np.asarray(low, np.float64), high), _TINY)
    return channel_max ** alpha / np.maximum(np.abs(kernel).max(axis=1), _TINY) ** (1 - alpha)


def outlier_channels(low, high, limit, gap=OUTLIER_GAP):
    """The input channels (indices, widest first) to keep out of a shared int8 range: the `k` widest, `k` at most
    `limit`, where one channel's range is the most times wider than the next one's, if at least `gap` times
    (none where no such step exists)."""
    widths = np.maximum(-np.asarray(low, np.float64), np.asarray(high, np.float64))
    order = np.argsort(-widths, kind="stable")
    ranked = widths[order]
    steps = [ranked[k - 1] / max(ranked[k], _TINY) for k in range(1, min(limit, widths.size - 1) + 1)]
    if not steps or max(steps) < gap:
        return order[:0]
    return order[:int(np.argmax(steps)) + 1]


class QuantizedTensor(NamedTuple):
    """uint8 `values` of a float tensor `x ~ low + values * (high - low) / 255` (TensorFlow's MIN_FIRST), and the
    float32 `outliers` `[rows, k]` of the channels kept out of that range (`outlier_channels`), or None. On a range
    per row (`Int8Dense`'s `per_token`): `x ~ row_scale * (r0 + values * (r1 - r0) / 255)` with `(r0, r1)`
    `PER_TOKEN_RANGE` and `row_scale` float32 `[rows, 1]`; `low` and `high` then only name the calibrated range."""

    values: tf.Tensor
    low: float
    high: float
    outliers: tf.Tensor | None = None
    row_scale: tf.Tensor | None = None


class Int8Dense(tf.Module):
    """`activation(x @ kernel + bias) [+ residual]` on 8-bit integers, in one op after the input's quantization.

    Args:
        kernel: float `[inputs, units]`, quantized with a scale per column;
            bias: float `[units]`.
        input_range: `(low, high)` of the input as it is quantized (after
            `input_scale`), made a `quantization_range`.
        input_scale: `[inputs]` multiplier of a float input before it is
            quantized (SmoothQuant's `1 / s`; the kernel's rows hold `s`), or None.
        activation: a `POST_OPS` name applied to the sum, or None.
        output_range: `(low, high)`: the output is a `QuantizedTensor` on this
            range (the next `Int8Dense`'s input), not float.
        per_token: with an `output_range`: each output row is divided by
            its own scale (its greatest value, at least `low / r0`) and
            quantized on `PER_TOKEN_RANGE` `(r0, r1)`; `output_range` then
            only names the next matmul's calibrated range.
        per_token_input: the input is such a per-token `QuantizedTensor`.
        output_dtype: the float output's dtype (float32 or bfloat16).
        outlier_columns: output columns (indices) computed in float32 from the
            float input and returned as the output's `outliers` (with an
            `output_range` only); the other columns are the int8 output.
        outlier_rows: input channels (indices into the kernel's rows) that
            arrive as the input's `outliers`: multiplied by their rows in float32.
        weight_scale: `"column"` (each column's largest weight is 127) or
            `"paired"` (also every pair of adjacent rows within 128 together:
            oneDNN's 16-bit pair sums cannot saturate on CPUs without VNNI;
            `tf_msemb.cpus`); None: column where this CPU's sums are
            exact (AVX512-VNNI), else paired.
    Called with a float32 tensor or a `QuantizedTensor` on `input_range`,
    and an optional float32 `residual` added to the output.
    """

    def __init__(self, kernel, bias, input_range, input_scale=None, activation=None, output_range=None,
                 output_dtype=tf.float32, outlier_columns=None, outlier_rows=None, per_token=False,
                 per_token_input=False, weight_scale=None, name=None):
        super().__init__(name=name)
        if per_token and output_range is None:
            raise ValueError("an Int8Dense with per_token writes a QuantizedTensor: give it an output_range")
        self.per_token, self.per_token_input = per_token, per_token_input
        kernel, bias = np.asarray(kernel, np.float64), np.asarray(bias, np.float64)
        self.outlier_columns = self.outlier_rows = None
        if outlier_columns is not None and len(outlier_columns):
            if output_range is None:
                raise ValueError("an Int8Dense with outlier_columns writes a QuantizedTensor: give it an output_range")
            kept = np.setdiff1d(np.arange(kernel.shape[1]), outlier_columns)
            self.outlier_columns = (tf.Variable(kernel[:, outlier_columns].astype(np.float32), trainable=False),
                                    tf.Variable(bias[outlier_columns].astype(np.float32), trainable=False))
            kernel, bias = kernel[:, kept], bias[kept]
        if outlier_rows is not None and len(outlier_rows):
            self.outlier_rows = tf.Variable(kernel[outlier_rows].astype(np.float32), trainable=False)
            kernel = kernel[np.setdiff1d(np.arange(kernel.shape[0]), outlier_rows)]
        self.weight_scale = weight_scale or ("column" if this_cpu().exact_int8 else "paired")
        column_scale = np.maximum(np.abs(kernel).max(axis=0), _TINY)
        if self.weight_scale == "paired":
            # Rows 2j and 2j + 1 (a last odd row alone): their magnitudes' sum is at most 127 before rounding, so at
            # most 128 after, and 255 * 128 fits the 16-bit pair sum.
            magnitude = np.abs(kernel)
            pairs = magnitude[0::2] + np.pad(magnitude[1::2], [(0, magnitude.shape[0] % 2), (0, 0)])
            column_scale = np.maximum(column_scale, pairs.max(axis=0))
        # The op reads a qint8 weight `q` as `q * column_scale / 127`.
        quantized = np.clip(np.round(kernel / column_scale * 127), -127, 127).astype(np.int8)
        self.input_range = quantization_range(*input_range)
        self.input_scale = None if input_scale is None else tf.Variable(
            np.asarray(input_scale, np.float32), trainable=False)
        self.kernel = tf.Variable(quantized, trainable=False)
        self.column_scale = tf.Variable(column_scale.astype(np.float32), trainable=False)
        # The op reads the input as `x - low` (on [0, high - low]): `low` times each column's (dequantized) sum
        # joins the bias. A per-token input is read as `x / row_scale - r0`: `r0` times the sums is the op's bias
        # (`shifted_bias`), and the bias is added after the row scales.
        column_sums = quantized.astype(np.float64).sum(axis=0) * column_scale / 127
        self.shifted_bias = None
        if per_token_input:
            self.shifted_bias = tf.Variable((PER_TOKEN_RANGE[0] * column_sums).astype(np.float32), trainable=False)
        else:
            bias = bias + self.input_range[0] * column_sums
        self.bias = tf.Variable(bias.astype(np.float32), trainable=False)
        self.activation = activation
        self.post_op = POST_OPS[activation] if activation else None
        self.output_range = None if output_range is None else quantization_range(*output_range)
        self.output_dtype = tf.as_dtype(output_dtype)

    def _scaled(self, x):
        """Float input `x` in float32, times `input_scale`: what is quantized."""
        x = tf.cast(x, tf.float32)
        return x if self.input_scale is None else x * self.input_scale

    def _outlier_output(self, scaled):
        """The float32 `outlier_columns` of the input (times `input_scale`): `activation(x @ kernel + bias)`."""
        kernel, bias = self.outlier_columns
        y = tf.nn.bias_add(tf.matmul(scaled, kernel), bias)
        return ACTIVATIONS[self.activation](y) if self.activation else y

    def __call__(self, x, residual=None, training=False):
        if training:
            raise ValueError("Int8Dense runs inference only.")
        outliers = None
        if not isinstance(x, QuantizedTensor):
            scaled = self._scaled(x)
            outliers = None if self.outlier_columns is None else self._outlier_output(scaled)
            x = QuantizedTensor(quantize(scaled, *self.input_range), *self.input_range)
        elif (x.low, x.high) != self.input_range:
            raise ValueError(f"a QuantizedTensor on {(x.low, x.high)} reached an Int8Dense on {self.input_range}")
        elif self.outlier_columns is not None:
            raise ValueError("an Int8Dense with outlier_columns takes a float input")
        if (x.outliers is None) != (self.outlier_rows is None):
            raise ValueError("a QuantizedTensor's outliers and an Int8Dense's outlier_rows come together")
        if x.outliers is not None:
            product = tf.matmul(x.outliers, self.outlier_rows)
            residual = product if residual is None else tf.cast(residual, tf.float32) + product
        if (x.row_scale is not None) != self.per_token_input:
            raise ValueError("a per-token QuantizedTensor goes to an Int8Dense with per_token_input, and only there")
        if self.per_token_input:
            return self._per_token_input(x, residual)
        low, high = self.input_range
        fused = ["BiasAdd"] + ([self.post_op] if self.post_op else []) + (["Add"] if residual is not None else [])
        inputs = [x.values, tf.bitcast(self.kernel, tf.qint8), self.bias]
        inputs += [tf.cast(residual, tf.float32)] if residual is not None else []
        inputs += [0.0, high - low, -self.column_scale, self.column_scale]
        if self.output_range is None:
            return quantized_matmul(inputs, fused + ["Dequantize"], self.output_dtype)[0]
        if residual is not None:
            raise ValueError("an Int8Dense with an output_range adds no residual")
        if self.per_token:
            return self._per_token_output(quantized_matmul(inputs, fused + ["Dequantize"], tf.float32)[0], outliers)
        values = quantized_matmul(inputs + list(self.output_range), fused + ["Requantize"], tf.quint8)[0]
        return QuantizedTensor(values, *self.output_range, outliers)

    def _per_token_output(self, y, outliers):
        """Float32 output rows `y`, each times the inverse of its scale (`per_token`) and quantized on
        `PER_TOKEN_RANGE`: one pass over the rows and the quantization, no shift per row."""
        low, high = self.output_range
        floor = max(low / PER_TOKEN_RANGE[0], _TINY)
        scale = tf.maximum(tf.reduce_max(y, axis=1, keepdims=True), floor)
        return QuantizedTensor(quantize(y * tf.math.reciprocal(scale), *PER_TOKEN_RANGE), low, high, outliers, scale)

    def _per_token_input(self, x, residual):
        """The product of a per-token input: the integer sum on the rows' shared `PER_TOKEN_RANGE` (its `r0` term
        fused), times each row's scale, plus the bias."""
        r0, r1 = PER_TOKEN_RANGE
        inputs = [x.values, tf.bitcast(self.kernel, tf.qint8), self.shifted_bias, 0.0, r1 - r0,
                  -self.column_scale, self.column_scale]
        y = quantized_matmul(inputs, ["BiasAdd", "Dequantize"], tf.float32)[0] * x.row_scale + self.bias
        return y if residual is None else y + tf.cast(residual, tf.float32)


class RangeObserver(tf.Module):
    """Runs `dense` and records each input channel's least and greatest value (eager calibration), and a sample of
    its input rows (`sample_fraction` of them, chosen by `seed`) for ranges narrower than min/max
    (`tf_msemb.inference.int8_calibration`)."""

    def __init__(self, dense, sample_fraction=0.0, seed=0):
        super().__init__()
        self.dense = dense
        self.low = self.high = None
        self.sample_fraction = sample_fraction
        self._rng = np.random.default_rng(seed)
        self._rows = []

    def __call__(self, x, residual=None, training=False):
        values = tf.cast(x, tf.float32).numpy()
        low, high = values.min(axis=0), values.max(axis=0)
        self.low = low if self.low is None else np.minimum(self.low, low)
        self.high = high if self.high is None else np.maximum(self.high, high)
        if self.sample_fraction:
            self._rows.append(values[self._rng.random(len(values)) < self.sample_fraction])
        return self.dense(x, residual=residual, training=training)

    def sample(self):
        """The sampled input rows `[rows, channels]` (float32)."""
        return np.concatenate(self._rows) if self._rows else np.zeros([0, len(self.low)], np.float32)

    def weights(self):
        """The observed dense's float32 `(kernel, bias)` as NumPy arrays."""
        if self.low is None:
            raise ValueError("int8 calibration saw no tokens: give it at least one non-empty sentence.")
        return tuple(w.numpy().astype(np.float64) for w in self.dense.float_weights())


def minmax_range(observer, scale):
    """The range of an observed input times the per-channel `scale` (> 0): its least and greatest value."""
    return np.min(observer.low * scale), np.max(observer.high * scale)


def smooth(kernel, low, high, alpha):
    """SmoothQuant of a matmul whose input channels range over `[low, high]`: `(kernel with row j times s_j, 1 / s)`,
    what `Int8Dense` takes as kernel and input_scale."""
    s = smoothing_factors(low, high, kernel, alpha)
    return kernel * s[:, None], 1 / s


def _smoothed(observer, alpha, input_range, kernel=None):
    """`smooth` of an observed dense (its own kernel, or `kernel`), and the smoothed input's range by
    `input_range(observer, 1 / s)`."""
    kernel = observer.weights()[0] if kernel is None else kernel
    smoothed, inverse = smooth(kernel, observer.low, observer.high, alpha)
    return smoothed, inverse, input_range(observer, inverse)


def quantize_intermediate(observer, alpha, input_range=minmax_range, output_range=None, outlier_columns=None,
                          output_dtype=tf.float32, per_token=False, weight_scale=None):
    """The first feed-forward matmul of an observed layer as an `Int8Dense`: input smoothed at `alpha`, its range
    by `input_range`; the GELU output int8 on `output_range` (with float32 `outlier_columns`, and a range per token
    where `per_token`: `quantize_layer`) or, with no `output_range`, float `output_dtype` (the input of a bfloat16
    second matmul, `int8_calibration`'s `"matmul"` fallback)."""
    kernel, inverse, low_high = _smoothed(observer, alpha, input_range)
    return Int8Dense(kernel, observer.weights()[1], low_high, inverse, activation=observer.dense.activation,
                     output_range=output_range, output_dtype=output_dtype, outlier_columns=outlier_columns,
                     per_token=per_token, weight_scale=weight_scale)


def quantize_layer(observers, alpha, attention_dtype=tf.float32, input_range=minmax_range, outliers=(),
                   per_token=False, weight_scale=None):
    """The `Int8Dense`s of one packed layer's `LAYER_DENSES` (`qkv`, `attention_output`, `intermediate`,
    `output`), from the `RangeObserver`s that ran in their places; qkv writes `attention_dtype`.

    `input_range(observer, scale)`: the quantization range of an observed
    input times `scale` (`minmax_range`, or a narrower one; a scale of 0
    leaves a channel out). `outliers`: the GELU output's channels that stay
    float32 (`outlier_channels` of the output matmul's observer).
    `per_token`: the GELU output on a scale per token (`Int8Dense`'s `per_token`), read so by the second matmul.
    `weight_scale`: every matmul's (`Int8Dense`).
    """
    qkv, attention_output, intermediate, output = observers
    # The attention output's input smoothing divides the value columns of qkv: the attention output (a convex
    # combination of value rows) comes out divided.
    qkv_kernel, qkv_bias = qkv.weights()
    kernel, inverse, attended_range = _smoothed(attention_output, alpha, input_range)
    value_scale = np.concatenate([np.ones(qkv_kernel.shape[1] - inverse.size), inverse])
    fused_qkv_kernel, qkv_inverse, qkv_range = _smoothed(qkv, alpha, input_range, qkv_kernel * value_scale)
    outliers = np.asarray(outliers, np.int64)
    in_range = np.ones_like(output.low)
    in_range[outliers] = 0.0
    gelu_range = input_range(output, in_range)
    return (Int8Dense(fused_qkv_kernel, qkv_bias * value_scale, qkv_range, qkv_inverse, output_dtype=attention_dtype,
                      weight_scale=weight_scale),
            Int8Dense(kernel, attention_output.weights()[1], attended_range, weight_scale=weight_scale),
            quantize_intermediate(intermediate, alpha, input_range, output_range=gelu_range, outlier_columns=outliers,
                                  per_token=per_token, weight_scale=weight_scale),
            Int8Dense(*output.weights(), gelu_range, outlier_rows=outliers, per_token_input=per_token,
                      weight_scale=weight_scale))
