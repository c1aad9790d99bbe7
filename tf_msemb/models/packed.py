"""Inference over packed tokens: a sentence encoder run on the real tokens only (the export's default).

`PackedEncoder` runs an `Embedder`'s backbone as a `PackedBackbone` (see
`tf_msemb.models.packed_backbone`), then pools on segments, normalizes and
applies a `ProjectedEncoder`'s projection: the same vectors as the Keras
forward pass (float32: within 1e-5). `packed_support` says why an encoder
cannot be packed (the backbone's reasons, or a pooling other than mean, max
or first). Inference only: no dropout.

With a `compute_dtype` other than float32, the matmul weights are cast once,
when the `PackedEncoder` is made, into variables of their own (the cast per
call cost 14 % of bfloat16 encoding time); embeddings, residual sums, layer
norms and pooling stay float32. With `"int8"`, the layers' matmuls run on
8-bit integers calibrated on the user's sentences
(`tf_msemb.models.quantization`).
"""

import tensorflow as tf

from tf_msemb.models.encoder import Embedder
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.models.packed_backbone import PackedBackbone
from tf_msemb.models.packed_backbone import read_supported
from tf_msemb.models.quantization import DEFAULT_SMOOTHING
from tf_msemb.models.quantization import quantize_backbone

POOLINGS = ("mean", "max", "first")
# Padded attention grids of length-sorted sentences an export runs (`PackedBackbone.attention_groups`, the same
# function): int8 MiniLM on 64-sentence Multi30k batches, 1 grid 867 sentences/s, 4 grids 1,054 (one process,
# interleaved); a single sentence pays about 0.5 ms.
INFERENCE_ATTENTION_GROUPS = 4


def _read(encoder):
    """`(weights, None)` when `encoder` can run packed, else `(None, the reason it cannot)`."""
    projection = None
    if isinstance(encoder, ProjectedEncoder):
        projection, encoder = (encoder.projection.kernel, encoder.projection.bias), encoder.encoder
    if not isinstance(encoder, Embedder):
        return None, f"{type(encoder).__name__} is not an Embedder"
    weights, reason = read_supported(encoder.backbone)
    if reason:
        return None, reason
    if encoder.pooling_spec not in POOLINGS:
        return None, f"pooling {encoder.pooling_spec!r} is not one of {', '.join(POOLINGS)}"
    return {"backbone": weights, "projection": projection, "pooling": encoder.pooling_spec,
            "normalize": encoder.normalize}, None


def packed_support(encoder):
    """None when `encoder` can run packed, else the reason it cannot (for a log line)."""
    return _read(encoder)[1]


class PackedEncoder(tf.Module):
    """Ragged token ids `[b, (l)]` -> `[b, d]` float32, the same function as `encoder` at inference.

    Args:
        encoder: a built encoder for which `packed_support` returns None.
        compute_dtype: dtype of matmuls and attention (`"float32"` or
            `"bfloat16"`), or `"int8"`: the layers' matmuls in int8 (see
            `tf_msemb.models.quantization`), the rest float32.
        calibration: for int8, ragged token id batches whose matmul inputs
            set the quantization ranges (a few hundred of the user's sentences).
        smoothing: for int8, SmoothQuant's alpha.
    """

    def __init__(self, encoder, compute_dtype="float32", calibration=None, smoothing=DEFAULT_SMOOTHING, name=None):
        super().__init__(name=name)
        weights, reason = _read(encoder)
        if reason:
            raise ValueError(f"Cannot pack this encoder: {reason}.")
        if compute_dtype == "int8":
            if calibration is None:
                raise ValueError("An int8 PackedEncoder needs calibration batches.")
            self.backbone = PackedBackbone(weights["backbone"], "float32", attention_groups=INFERENCE_ATTENTION_GROUPS)
            quantize_backbone(self.backbone, calibration, smoothing)
        else:
            self.backbone = PackedBackbone(weights["backbone"], compute_dtype, frozen_cast=True,
                                           attention_groups=INFERENCE_ATTENTION_GROUPS)
        self.pooling = weights["pooling"]
        self.normalize = weights["normalize"]
        self.projection = self.backbone.dense(weights["projection"]) if weights["projection"] else None

    def __call__(self, ids):
        x = self.backbone(ids)
        pooled = self._pool(x, ids)
        pooled = l2_normalize(pooled) if self.normalize else pooled
        return pooled if self.projection is None else tf.cast(self.projection(pooled), tf.float32)

    def _pool(self, x, ids):
        if self.pooling == "first":
            return tf.gather(x, ids.row_starts())
        if self.pooling == "max":
            return tf.math.unsorted_segment_max(x, ids.value_rowids(), ids.nrows())
        return tf.math.unsorted_segment_mean(x, ids.value_rowids(), ids.nrows())
