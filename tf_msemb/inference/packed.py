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
(`tf_msemb.inference.quantization`).
"""

import functools
import json
from typing import NamedTuple

import tensorflow as tf
from tensorflow.python.framework import op_def_registry

from tf_msemb.inference import onednn
from tf_msemb.inference.control_flow import unlowered_cond
from tf_msemb.cpus import CpuKernels
from tf_msemb.cpus import this_cpu
from tf_msemb.inference.int8_calibration import Int8Options
from tf_msemb.inference.int8_calibration import calibrate
from tf_msemb.models.encoder import Embedder
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.models.packed_backbone import PackedBackbone
from tf_msemb.models.packed_backbone import read_supported

POOLINGS = ("mean", "max", "first")
# The TensorFlow ops an int8 graph holds beyond stock TensorFlow and tensorflow-text: oneDNN's, registered by
# x86-64 builds only (`int8_support`).
INT8_REQUIRED_OPS = ("_MklLayerNorm", "_MklQuantizeV2", "_QuantizedMatMul")
# Independent sub-batches an export encodes side by side (`PackedEncoder.streams`), and the padded attention grids
# of length-sorted sentences each runs (`PackedBackbone.attention_groups`); both leave every vector as it is.
# int8 MiniLM on 64-sentence Multi30k batches, sentences/s in one process, interleaved: 1 stream of 1 grid 867,
# of 4 grids 1,054; 2 streams of 2 grids 1,210 against 1 of 4 at 1,128 (with fused layer norms 1,313).
INFERENCE_STREAMS = 2
INFERENCE_ATTENTION_GROUPS = 2


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
            `tf_msemb.inference.quantization`), the rest float32.
        calibration: for int8, ragged token id batches whose matmul inputs
            set the quantization ranges (a few thousand of the user's sentences).
        held_out: for int8, ragged token id batches the calibration's
            choices are measured on (`int8_calibration.calibrate`).
        int8_options: for int8, an `Int8Options`; `int8_report` holds what
            the calibration chose and measured.
        streams: a batch of at least this many sentences is encoded as this
            many sub-batches of every `streams`-th sentence by length, whose
            ops share no inputs, so TensorFlow runs them side by side. It
            keeps both cores of a small machine busy where one op would not:
            TensorFlow runs a oneDNN matmul whose operands fit in L2 on one
            thread (an int8 `[992, 384] x [384, 384]` among them), and most
            of the small ops of attention run on one. Serve it with
            TensorFlow's intra-op threads at cores / streams: at one per
            core, each stream's oneDNN ops split over all cores and wait
            for the other stream's (int8 MiniLM on 2 cores: 1,315 sentences/s
            at 2 intra-op threads, 1,542 at 1).
        single_sentence: a batch of one sentence takes a branch of its own
            (`PackedBackbone.encode_one`: no sorting, grids or streams; an
            `unlowered_cond`, so the batch branch's ops are not visited).
            int8 MiniLM, one Multi30k sentence in a TF Serving Session at
            intra-op threads 1: 1,846 ops executed and p50 6.04 ms, against
            1,371 and 4.41 ms (`tools/benchmarks/profile_request.py`). Off by default:
            the batch branch is then a called function, which the restored
            function optimizes as the graph (same vectors, same speed) but
            a v1 Session (TF Serving) runs without TensorFlow's oneDNN
            rewrites: batches of 64 took 54.7 against 43.6 ms there, and
            bfloat16 and int8 vectors differ from the restored function's
            by bfloat16 rounding of attention.
    """

    def __init__(self, encoder, compute_dtype="float32", calibration=None, held_out=None, int8_options=Int8Options(),
                 streams=INFERENCE_STREAMS, single_sentence=False, name=None):
        super().__init__(name=name)
        weights, reason = _read(encoder)
        if reason:
            raise ValueError(f"Cannot pack this encoder: {reason}.")
        self.pooling = weights["pooling"]
        self.normalize = weights["normalize"]
        self._int8_report = "null"  # JSON: a dict attribute of a tf.Module would be wrapped for tracking
        self.int8_options = None  # for int8: the `Int8Options` as resolved for this CPU (`Int8Options.for_cpu`)
        if compute_dtype == "int8":
            if not calibration:
                raise ValueError("An int8 PackedEncoder needs calibration batches.")
            int8_options = int8_options.for_cpu(int8_support().kernels)
            self.int8_options = int8_options
            # int8 graphs need oneDNN's kernels anyway: its layer norm too. Attention in bfloat16 (the default):
            # int8 MiniLM 1,379 against 1,341 sentences/s in float32 (one process, interleaved), min cosine to
            # float32 0.9938 against 0.9940.
            self.backbone = PackedBackbone(weights["backbone"], "float32", attention_groups=INFERENCE_ATTENTION_GROUPS,
                                           fused_norm=onednn.layer_norm, attention_dtype=int8_options.attention)
            reference = PackedBackbone(weights["backbone"], "float32", attention_groups=INFERENCE_ATTENTION_GROUPS)
            self._int8_report = json.dumps(calibrate(reference, self.backbone, calibration, held_out or calibration,
                                                     self._pool, int8_options))
        else:
            self.backbone = PackedBackbone(weights["backbone"], compute_dtype, frozen_cast=True,
                                           attention_groups=INFERENCE_ATTENTION_GROUPS)
        self.projection = self.backbone.dense(weights["projection"]) if weights["projection"] else None
        self.streams = streams
        self.single_sentence = single_sentence
        # The batch branch calls a function of its own: TensorFlow's graph rewrites (oneDNN ops and fusions) run
        # on called functions, not on an `If`'s branches, and without them batches ran 16 % slower (int8 MiniLM).
        self._batch_function = tf.function(self._encode_batch)

    @property
    def int8_report(self):
        """What int8 calibration chose and measured (`int8_calibration.calibrate`), or None."""
        return json.loads(self._int8_report)

    def add_to_report(self, **entries):
        """Adds `entries` (JSON-ready) to `int8_report`."""
        self._int8_report = json.dumps({**self.int8_report, **entries})

    def __call__(self, ids):
        """Ragged token ids `[b, (l)]` -> `[b, d]`."""
        if self.single_sentence:
            batch = self._encode_batch if tf.executing_eagerly() else self._batch_function
            return unlowered_cond(ids.nrows() == 1, lambda: self._encode_one(ids), lambda: batch(ids))
        return self._encode_batch(ids)

    def _encode_one(self, ids):
        x = self.backbone.encode_one(ids.flat_values)
        return self._finish(self._pool(x, ids))

    def _encode_batch(self, ids):
        if self.streams == 1:
            return self._encode(ids)
        batch = ids.nrows(out_type=tf.int32)

        def side_by_side():
            order = tf.argsort(ids.row_lengths(), stable=True)
            parts = [order[stream::self.streams] for stream in range(self.streams)]
            encoded = tf.concat([self._encode(tf.gather(ids, part), sorted_by_length=True) for part in parts], axis=0)
            return tf.gather(encoded, tf.math.invert_permutation(tf.concat(parts, axis=0)))

        return tf.cond(batch >= self.streams, side_by_side, lambda: self._encode(ids))

    def _encode(self, ids, sorted_by_length=False):
        return self._finish(self._pool(self.backbone(ids, sorted_by_length=sorted_by_length), ids))

    def _finish(self, pooled):
        """Normalization and projection of pooled `[b, d]`."""
        pooled = l2_normalize(pooled) if self.normalize else pooled
        return pooled if self.projection is None else tf.cast(self.projection(pooled), tf.float32)

    def _pool(self, x, ids):
        if self.pooling == "first":
            return tf.gather(x, ids.row_starts())
        if self.pooling == "max":
            return tf.math.unsorted_segment_max(x, ids.value_rowids(), ids.nrows())
        return tf.math.unsorted_segment_mean(x, ids.value_rowids(), ids.nrows())


def packed_embedder(tokenizer, encoder, packed=None):
    """`[b]` strings -> `[b, d]` float32: what `encoder(tokenizer(texts))` computes, over packed tokens; or None
    when the encoder cannot run packed (`packed_support` says why).

    The encoder's own output, unlike an export's: its normalization or none
    (a teacher's raw vectors stay raw). One traced function for every batch
    size. `packed`: a `PackedEncoder` of `encoder` to run (an int8 one, to
    measure it); default a float32 one. What `tools/precompute_teacher.py`
    encodes a teacher's vectors with.
    """
    if packed is None:
        if packed_support(encoder):
            return None
        packed = PackedEncoder(encoder)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def embed(texts):
        with tf.device("/cpu:0"):
            ids = tokenizer.tokenize(texts)
        return packed(ids)

    return embed


class Int8Support(NamedTuple):
    """Whether int8 graphs run in this process: `unsupported` (why not, or None), `note` (how they run on this CPU:
    outputs, attention, weight bits) and the `CpuKernels` both come from."""

    unsupported: str | None
    note: str
    kernels: CpuKernels


@functools.cache
def int8_support():
    """The `Int8Support` of this process, decided from the CPU's features (`tf_msemb.cpus`, the oneDNN ISA
    cap included) and TensorFlow's op registry: nothing is built or run, so it cannot abort its caller (oneDNN
    aborts the process on a kernel it lacks)."""
    kernels = this_cpu()
    unsupported = kernels.int8_unsupported()
    missing = [op for op in INT8_REQUIRED_OPS if op_def_registry.get(op) is None]
    if unsupported is None and missing:
        unsupported = f"this TensorFlow {tf.__version__} does not register {', '.join(missing)} (x86-64 builds do)"
    if unsupported:
        unsupported += "; export with --precision=mixed_bfloat16 (or float32) instead"
    return Int8Support(unsupported, kernels.int8_note(), kernels)
