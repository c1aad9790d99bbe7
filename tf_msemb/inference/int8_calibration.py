"""Calibrating an int8 backbone layer by layer: activation ranges, smoothing per layer, bfloat16 fallback, a report.

A deep encoder loses more to int8 than a shallow one: each layer's rounding
error enters the next layer's input. `calibrate` quantizes a `PackedBackbone`
one layer at a time and measures what each choice costs where it is made:

1. The float32 reference runs layer `i` on its own (float32) input states,
   with `RangeObserver`s in the places of the four matmuls: each input
   channel's min/max over every calibration sentence, and a sample of rows.
2. Each candidate SmoothQuant alpha (one, or `SMOOTHING_CANDIDATES` with
   `smoothing="per_layer"`) gives an int8 layer; the alpha whose layer output
   is closest (mean token cosine) to the float32 layer's, on the held-out
   sentences with the same float32 input, is kept. Activation ranges are the
   observed min/max, a percentile of the sampled values or the range that
   minimizes their mean squared rounding-and-clipping error (`RANGES`). The
   GELU output's outlier channels (`quantization.outlier_channels`) stay
   float32 and out of that range.
3. With a `fallback_cosine` budget, the layers that lose most (lowest isolated
   cosine) run their matmuls in bfloat16 instead, one at a time, until the
   held-out sentence vectors' mean cosine to float32 reaches the budget or
   `max_fallback_layers` is reached. With `fallback_unit="block"` the unit is
   half a layer (`BLOCKS`: attention's two matmuls, or the feed-forward's
   two), each scored by its own isolated cosine (that block int8, the rest
   of the layer float32): a layer that loses in one block keeps the other's
   int8 speed. With `fallback_unit="matmul"` the units are finer still: a
   layer's attention block (its two matmuls share the folded smoothing) and
   its second feed-forward matmul alone (`MATMULS`), whose int8 input, the
   GELU output, no smoothing reaches; the first one stays int8 and writes
   that input in bfloat16. Each is scored by what falling back gains: the
   layer's isolated cosine with that unit in bfloat16 and the rest int8,
   less its all-int8 one; the largest gains fall back first.

Each layer's `cumulative_cosine` (the exported int8 layers from the
embeddings up to its output, against float32's) shows where the error
grows. What was chosen and measured is returned as a JSON-ready report (written into
the export's metadata, printed by `tools/int8_report.py`).
"""

import contextlib
import dataclasses
import logging

import numpy as np
import tensorflow as tf

from tf_msemb.cpus import BFLOAT16_ISAS
from tf_msemb.cpus import EXACT_INT8_ISAS
from tf_msemb.cpus import INT8_BASE_ISAS
from tf_msemb.cpus import WEIGHT_SCALES
from tf_msemb.cpus import this_cpu
from tf_msemb.models.packed_backbone import LAYER_DENSES
from tf_msemb.models.packed_backbone import PackedDense
from tf_msemb.inference.quantization import DEFAULT_OUTLIER_CHANNELS
from tf_msemb.inference.quantization import DEFAULT_SMOOTHING
from tf_msemb.inference.quantization import RangeObserver
from tf_msemb.inference.quantization import minmax_range
from tf_msemb.inference.quantization import outlier_channels
from tf_msemb.inference.quantization import quantize_intermediate
from tf_msemb.inference.quantization import quantize_layer

RANGES = ("minmax", "percentile", "mse")
TARGETS = ("native", "avx2")
ATTENTION_DTYPES = ("bfloat16", "float32")
GELU_RANGES = ("tensor", "token")
SMOOTHING_CANDIDATES = (0.5, 0.6, 0.7, 0.8, 0.9)
FALLBACK_UNITS = ("layer", "block", "matmul")
# A layer's matmuls in the two groups that quantize together: the attention output's smoothing is folded into qkv's
# value columns, and the intermediate matmul writes the int8 input of the output one.
BLOCKS = {"attention": ("qkv", "attention_output"), "feed_forward": ("intermediate", "output")}
# The units of the "matmul" fallback: the attention block, and the second feed-forward matmul on its own.
MATMULS = ("attention", "feed_forward_output")
UNIT_LABELS = {"attention": "attention", "feed_forward": "feed-forward", "feed_forward_output": "feed-forward output"}
SAMPLED_ROWS = 8192  # input rows per matmul that percentile and MSE ranges are chosen on
MSE_VALUES = 1 << 20  # sampled values the MSE search scores each candidate range on
MSE_SHRINKS = np.linspace(0.1, 1.0, 46)  # candidate ranges: the min/max range times each


@dataclasses.dataclass(frozen=True)
class Int8Options:
    """How an int8 export is calibrated (see the module docstring).

    Args:
        smoothing: SmoothQuant's alpha (Xiao et al. 2023, Eq. 4) for every
            layer, or `"per_layer"`: the best of `SMOOTHING_CANDIDATES` for each.
        ranges: `"minmax"` (observed extremes), `"percentile"` (the
            `percentile`-th and `100 - percentile`-th of the sampled values)
            or `"mse"` (the min/max range shrunk by the factor whose
            quantization of the sampled values has the least squared error).
        percentile: for `ranges="percentile"`.
        fallback_cosine: budget: bfloat16 layers (or blocks) until the held-out sentence
            vectors' mean cosine to float32 is at least this; None: all int8.
        max_fallback_layers: at most this many bfloat16 units (None: any).
        fallback_unit: what falls back to bfloat16: a `"layer"`, a
            `"block"` (`BLOCKS`: half a layer) or a `"matmul"` (`MATMULS`).
        attention: dtype attention runs in between the int8 matmuls
            (`"bfloat16"`, which the query-key-value matmul writes, or
            `"float32"`: long inputs stay closer to float32); None: bfloat16
            where oneDNN has bfloat16 kernels (`for_cpu`), else float32.
        stress_inputs: the calibration text's most frequent words, each
            repeated up to the longest input, that calibrate the ranges too
            (`tf_msemb.inference.int8_export.calibration_batches`), and half as many
            runs of its sentences joined up to that length. Attention over
            a long repetition reaches values that short sentences never
            do: MiniLM's attention output input 3.3 times past its calibrated
            range on `"x " * 300`, cosine 0.90 to float32 without them and 0.99
            with 16 (other words than `x`).
        outlier_channels: at most this many channels of each layer's GELU
            output (the second feed-forward matmul's input) computed in
            float32 and kept out of its int8 range: the widest, cut where one
            channel's range is most times the next one's, at least
            `quantization.OUTLIER_GAP` times (`quantization.outlier_channels`); 0: none.
        gelu_range: the GELU output's int8 range: one calibrated range per
            `"tensor"`, or one per `"token"` (scaled by the token's greatest
            value, found as it runs: `quantization`'s docstring says what it
            costs and gains).
        target: the CPUs the export is for: `"native"`, the fastest exact
            kernels of the CPU that calibrates (bfloat16 attention, outputs
            and fallbacks where it has AVX-512, 8-bit weights where it has
            AVX512-VNNI; `tf_msemb.cpus`); `"avx2"`, every x86-64 CPU
            with AVX2: float32 attention, outputs and fallbacks, paired weights.
        weight_scale, fallback_dtype: set by `for_cpu` from `target` and the
            CPU (`cpus.WEIGHT_SCALES`: `"column"` where sums are exact,
            else `"paired"`; `"bfloat16"` or `"float32"`), in the report.
    """

    smoothing: float | str = DEFAULT_SMOOTHING
    ranges: str = "minmax"
    percentile: float = 99.99
    fallback_cosine: float | None = None
    max_fallback_layers: int | None = None
    attention: str | None = None
    stress_inputs: int = 16
    fallback_unit: str = "layer"
    outlier_channels: int = DEFAULT_OUTLIER_CHANNELS
    gelu_range: str = "tensor"
    target: str = "native"
    weight_scale: str | None = None
    fallback_dtype: str | None = None

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"int8 target {self.target!r} is not one of {', '.join(TARGETS)}")
        if self.weight_scale not in (None, *WEIGHT_SCALES):
            raise ValueError(f"int8 weight_scale {self.weight_scale!r} is not one of {', '.join(WEIGHT_SCALES)}")
        if self.gelu_range not in GELU_RANGES:
            raise ValueError(f"int8 gelu_range {self.gelu_range!r} is not one of {', '.join(GELU_RANGES)}")
        if self.outlier_channels < 0:
            raise ValueError(f"int8 outlier_channels {self.outlier_channels} is negative")
        if self.ranges not in RANGES:
            raise ValueError(f"int8 ranges {self.ranges!r} is not one of {', '.join(RANGES)}")
        if self.smoothing != "per_layer" and not 0.0 <= float(self.smoothing) <= 1.0:
            raise ValueError(f"int8 smoothing {self.smoothing!r} is neither an alpha in [0, 1] nor 'per_layer'")
        if self.fallback_unit not in FALLBACK_UNITS:
            raise ValueError(f"int8 fallback unit {self.fallback_unit!r} is not one of {', '.join(FALLBACK_UNITS)}")
        if self.attention is not None and self.attention not in ATTENTION_DTYPES:
            raise ValueError(f"int8 attention {self.attention!r} is not one of {', '.join(ATTENTION_DTYPES)}")
        if self.target == "avx2" and self.attention == "bfloat16":
            raise ValueError("int8 attention 'bfloat16' needs AVX-512 (oneDNN's bfloat16 kernels), so the export "
                             "would not run on every AVX2 CPU that int8 target 'avx2' promises: leave the attention "
                             "unset (float32) or use target 'native'")
        if not 50.0 < self.percentile <= 100.0:
            raise ValueError(f"int8 percentile {self.percentile} is not in (50, 100]")

    def for_cpu(self, kernels):
        """These options with `attention`, `weight_scale` and `fallback_dtype` set for `target` on the CPU of
        `kernels` (a `cpus.CpuKernels`); bfloat16 asked for where oneDNN has no bfloat16 kernel fails here,
        not in oneDNN."""
        native = self.target == "native"
        bfloat16 = native and kernels.bfloat16
        if self.attention == "bfloat16" and not kernels.bfloat16:
            raise ValueError(f"int8 attention 'bfloat16' cannot run on {kernels.where()}: oneDNN has no bfloat16 "
                             "kernels there; use float32 (or leave it unset)")
        attention = self.attention or ("bfloat16" if bfloat16 else "float32")
        return dataclasses.replace(self, attention=attention,
                                   weight_scale="column" if native and kernels.exact_int8 else "paired",
                                   fallback_dtype="bfloat16" if bfloat16 else "float32")

    def cpu_requirements(self):
        """`[(oneDNN ISAs, any one of which is needed), what for]` of the int8 graph these options (`for_cpu`) build."""
        needs = [(INT8_BASE_ISAS, "int8 matmuls (u8 x s8 kernels of oneDNN)")]
        if "bfloat16" in (self.attention, self.fallback_dtype):
            needs.append((BFLOAT16_ISAS, "bfloat16 attention and int8 matmuls writing bfloat16"))
        if self.weight_scale == "column":
            needs.append((EXACT_INT8_ISAS, "exact sums of weights scaled per column (VNNI; elsewhere the pair sums of "
                                           "oneDNN saturate)"))
        return needs

    def alphas(self):
        return SMOOTHING_CANDIDATES if self.smoothing == "per_layer" else (float(self.smoothing),)

    def input_range(self, observer, scale):
        """The quantization range of an observed matmul input times `scale`, by `ranges`."""
        low, high = minmax_range(observer, scale)
        if self.ranges == "minmax":
            return low, high
        values = (observer.sample() * scale).ravel()
        if not values.size:
            return low, high
        if self.ranges == "percentile":
            return (min(np.percentile(values, 100 - self.percentile), 0.0),
                    max(np.percentile(values, self.percentile), 0.0))
        return mse_range(values, low, high)


def mse_range(values, low, high):
    """The range `[t * low, t * high]` (`t` in `MSE_SHRINKS`) whose 256-level quantization of `values` has the
    least mean squared error, clipping included."""
    values = values[np.random.default_rng(0).permutation(values.size)[:MSE_VALUES]].astype(np.float64)
    low, high = min(low, 0.0), max(high, 0.0)
    best, best_error = (low, high), np.inf
    for shrink in MSE_SHRINKS:
        lo, hi = low * shrink, high * shrink
        step = max(hi - lo, 1e-12) / 255
        error = np.mean((values - (np.clip(np.round((values - lo) / step), 0, 255) * step + lo)) ** 2)
        if error < best_error:
            best, best_error = (lo, hi), error
    return best


def fallback_layer(denses, dtype="bfloat16"):
    """A layer's float matmuls (`PackedDense`s) in `dtype` (`Int8Options.fallback_dtype`) with float32 residual sums:
    its int8 fallback."""
    return [PackedDense([tf.constant(kernel)], [tf.Variable(bias, trainable=False)], tf.as_dtype(dtype),
                        frozen_cast=True,
                        activation=dense.activation)
            for dense, (kernel, bias) in ((dense, dense.float_weights()) for dense in denses)]


def _token_cosines(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    norms = np.maximum(np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1), 1e-12)
    return (got * want).sum(axis=-1) / norms


def _summary(cosines):
    return {"mean": round(float(np.mean(cosines)), 6), "min": round(float(np.min(cosines)), 6)}


class _Batch:
    """One batch of token ids, sorted by length as the backbones run them, with the reference's attention groups."""

    def __init__(self, ids, reference):
        self.original = ids
        self.ids, _, self.groups = reference.sorted_input(ids)


def _layer_function(target, layer):
    """A traced `target.run_layer` of `layer` (int8 matmuls need a graph) on sorted ids' token states."""

    @tf.function(reduce_retracing=True)
    def run(x, ids):
        return target.run_layer(layer, x, target.sorted_input(ids)[2])

    return run


class _TracedOnPurpose(logging.Filter):
    """Drops TensorFlow's retracing warning: calibration traces each candidate layer once, on purpose."""

    def filter(self, record):
        return "triggered tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def _retracing_expected():
    quiet = _TracedOnPurpose()
    tf.get_logger().addFilter(quiet)
    try:
        yield
    finally:
        tf.get_logger().removeFilter(quiet)


def _layer_cosines(target, layer, x, ids, want):
    """Token cosines of `layer` (run by `target` on states `x` of sorted `ids`) to the float32 layer's `want`."""
    return _token_cosines(_layer_function(target, layer)(x, ids), want)


def calibrate(reference, target, batches, held_out, pool, options=Int8Options()):
    """Makes `target` (a float32-matmul `PackedBackbone` with the same weights as `reference`) int8, in place.

    Args:
        reference: the float32 `PackedBackbone` the int8 one is measured against.
        target: the backbone whose layers' denses become int8 (or bfloat16).
        batches: ragged token ids whose matmul inputs set the ranges.
        held_out: ragged token ids the choices are measured on (cosines).
        pool: `(token states, ids) -> [b, d]` sentence vectors of the encoder.
        options: `Int8Options` (`for_cpu` of this CPU where not yet).
    Returns: the report (JSON-ready): options, per-layer alpha, precision and
    isolated cosine (per block too with `fallback_unit="block"`, and with
    each `MATMULS` unit in bfloat16 with `"matmul"`), the units that fell
    back, and the held-out sentence cosines before and after it.
    """
    with _retracing_expected():
        return _calibrate(reference, target, batches, held_out, pool, options)


def _calibrate(reference, target, batches, held_out, pool, options):
    if options.weight_scale is None:
        options = options.for_cpu(this_cpu())
    if not batches or not held_out:
        raise ValueError("int8 calibration needs calibration and held-out sentences (at least one of each).")
    fraction = min(1.0, SAMPLED_ROWS / max(1, sum(int(tf.size(ids.flat_values)) for ids in batches)))
    calibration = [_Batch(ids, reference) for ids in batches]
    # Every held-out sentence in one batch: each candidate layer is traced and run once.
    check = _Batch(tf.concat(list(held_out), axis=0), reference)
    states = [reference.embed(batch.ids) for batch in calibration]
    check_states = [reference.embed(check.ids)]
    layers, replacements = [], {}
    for index, layer in enumerate(reference.layers):
        observers = [RangeObserver(layer[role], fraction if options.ranges != "minmax" else 0.0, seed=index)
                     for role in LAYER_DENSES]
        watched = dict(layer, **dict(zip(LAYER_DENSES, observers)))
        states = [reference.run_layer(watched, x, batch.groups) for x, batch in zip(states, calibration)]
        want = reference.run_layer(layer, check_states[-1], check.groups)
        output = observers[LAYER_DENSES.index("output")]
        outliers = outlier_channels(output.low, output.high, options.outlier_channels)
        best = None
        for alpha in options.alphas():
            candidate = dict(target.layers[index], **dict(zip(LAYER_DENSES, quantize_layer(
                observers, alpha, target.attention_dtype, options.input_range, outliers,
                per_token=options.gelu_range == "token", weight_scale=options.weight_scale))))
            cosines = _layer_cosines(target, candidate, check_states[-1], check.ids, want)
            if best is None or cosines.mean() > best[2].mean():
                best = (alpha, candidate, cosines)
        entry = {"layer": index, "smoothing": best[0], "precision": "int8", "isolated_cosine": _summary(best[2]),
                 "outlier_channels": [int(channel) for channel in outliers]}
        if options.fallback_unit == "block":
            entry["blocks"] = {}
            for block, roles in BLOCKS.items():
                alone = dict(target.layers[index], **{role: best[1][role] for role in roles})
                cosines = _layer_cosines(target, alone, check_states[-1], check.ids, want)
                entry["blocks"][block] = {"precision": "int8", "isolated_cosine": _summary(cosines)}
        elif options.fallback_unit == "matmul":
            entry["matmuls"] = {}
            roles = dict(zip(LAYER_DENSES, observers))
            for name, replacement in _matmul_fallbacks(layer, roles["intermediate"], best[0], options).items():
                cosines = _layer_cosines(target, dict(best[1], **replacement), check_states[-1], check.ids, want)
                entry["matmuls"][name] = {"precision": "int8", "fallback_cosine": _summary(cosines)}
                replacements[index, name] = replacement
        target.layers[index].update((role, best[1][role]) for role in LAYER_DENSES)
        layers.append(entry)
        check_states.append(want)

    want = pool(reference(check.original), check.original)

    def sentence_cosines():
        return _token_cosines(tf.function(lambda ids: pool(target(ids), ids))(check.original), want)

    all_int8 = sentence_cosines()
    cosines, fallback = all_int8, []
    units = _fallback_units(layers, options.fallback_unit)
    limit = len(units) if options.max_fallback_layers is None else options.max_fallback_layers
    while options.fallback_cosine is not None and cosines.mean() < options.fallback_cosine and len(fallback) < limit:
        index, part = units[len(fallback)]
        if options.fallback_unit == "matmul":
            target.layers[index].update(replacements[index, part])
        else:
            roles = LAYER_DENSES if part is None else BLOCKS[part]
            target.layers[index].update(zip(roles, fallback_layer([reference.layers[index][role] for role in roles],
                                                                  options.fallback_dtype)))
        _mark_fallback(layers[index], part, options.fallback_dtype)
        fallback.append((index, part))
        cosines = sentence_cosines()
    exported = target.embed(check.ids)
    for index, layer in enumerate(target.layers):
        exported = _layer_function(target, layer)(exported, check.ids)
        layers[index]["cumulative_cosine"] = _summary(_token_cosines(exported, check_states[index + 1]))
    by_block = {} if options.fallback_unit == "layer" else {
        f"fallback_{options.fallback_unit}s": [[index, part] for index, part in fallback]}
    return {**dataclasses.asdict(options), "held_out_sentences": int(check.original.nrows()),
            "layers": layers, "fallback_layers": list(dict.fromkeys(index for index, _ in fallback)), **by_block,
            "sentence_cosine": {"all_int8": _summary(all_int8), "exported": _summary(cosines)}}


def _matmul_fallbacks(layer, intermediate, alpha, options):
    """The `MATMULS` units of a float32 `layer` in `options.fallback_dtype`, each as the denses that replace its int8
    ones: the attention block's two matmuls, or the second feed-forward matmul with the first (observed
    `intermediate`, int8 at smoothing `alpha`) writing its input in that dtype."""
    attention, dtype = BLOCKS["attention"], options.fallback_dtype
    return {"attention": dict(zip(attention, fallback_layer([layer[role] for role in attention], dtype))),
            "feed_forward_output": {
                "intermediate": quantize_intermediate(intermediate, alpha, options.input_range,
                                                      output_dtype=tf.as_dtype(dtype),
                                                      weight_scale=options.weight_scale),
                "output": fallback_layer([layer["output"]], dtype)[0]}}


def _fallback_units(layers, unit):
    """`(layer index, part name or None)` of every unit that can fall back, first the one that loses most: lowest
    isolated cosine (layers, blocks) or largest gain in bfloat16 (matmuls)."""
    if unit == "layer":
        units = [((i, None), layer["isolated_cosine"]["mean"]) for i, layer in enumerate(layers)]
    elif unit == "block":
        units = [((i, block), entry["isolated_cosine"]["mean"])
                 for i, layer in enumerate(layers) for block, entry in layer["blocks"].items()]
    else:
        units = [((i, name), layer["isolated_cosine"]["mean"] - entry["fallback_cosine"]["mean"])
                 for i, layer in enumerate(layers) for name, entry in layer["matmuls"].items()]
    return [unit for unit, _ in sorted(units, key=lambda item: item[1])]


def _mark_fallback(layer, part, dtype):
    """Records in a layer's report entry that `part` (a block or matmul unit; None: all of it) runs in `dtype`."""
    if part is None:
        layer["precision"] = dtype
        return
    parts = layer["blocks" if "blocks" in layer else "matmuls"]
    parts[part]["precision"] = dtype
    fallen = [name for name, entry in parts.items() if entry["precision"] == dtype]
    whole = "blocks" in layer and len(fallen) == len(parts)
    layer["precision"] = dtype if whole else f"{dtype} {', '.join(UNIT_LABELS[name] for name in fallen)}"


def describe_fallback(report):
    """What a calibration `report` put in bfloat16, as text: `layers: 4, 5`, `blocks: 4 feed-forward, ...` or
    `matmuls: 4 feed-forward output, ...`."""
    for unit in ("block", "matmul"):
        if report.get(f"fallback_{unit}s") is not None:
            units = [f"{index} {UNIT_LABELS[part]}" for index, part in report[f"fallback_{unit}s"]]
            return f"{unit}s: {', '.join(units) or 'none'}"
    return f"layers: {', '.join(map(str, report.get('fallback_layers') or [])) or 'none'}"


def describe_outliers(report):
    """Which GELU output channels a calibration `report` kept in float32, as text: `7 (layers 0, 1, 4)` or `none`."""
    layers = [layer["layer"] for layer in report.get("layers", []) if layer.get("outlier_channels")]
    count = sum(len(layer.get("outlier_channels") or []) for layer in report.get("layers", []))
    return f"{count} (layers {', '.join(map(str, layers))})" if count else "none"
