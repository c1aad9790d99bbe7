"""The int8 export path: calibration text to batches, the calibrated `PackedEncoder`, robustness probes, CLI flags.

`int8_packed` is what `inference_module(precision="int8")` runs: the first
`calibration_sentences` lines of the user's file (with long repetitive
inputs made of its words, `stress_text`), the last eighth of them held out
to measure the choices (`inference.int8_calibration.calibrate`), and
the sentence vectors of `PROBES` (inputs unlike any calibration text) compared
with float32's. Both go into the export's metadata (`int8_calibration`).
`define_flags` / `options_from_flags` are the command-line flags that
`tools/export_pretrained.py` and `tools/int8_report.py` share.
"""

import collections

import tensorflow as tf
from absl import flags
from absl import logging

from tf_msemb.models.encoder import l2_normalize
from tf_msemb.inference.int8_calibration import ATTENTION_DTYPES
from tf_msemb.inference.int8_calibration import FALLBACK_UNITS
from tf_msemb.inference.int8_calibration import GELU_RANGES
from tf_msemb.inference.int8_calibration import RANGES
from tf_msemb.inference.int8_calibration import TARGETS
from tf_msemb.inference.int8_calibration import Int8Options
from tf_msemb.inference.packed import PackedEncoder
from tf_msemb.inference.packed import int8_support
from tf_msemb.inference.packed import packed_support
from tf_msemb.inference.quantization import DEFAULT_SMOOTHING
from tf_msemb.text_files import read_lines

HELD_OUT_SENTENCES = 512  # calibration lines at most that measure the int8 choices instead of setting ranges
# Inputs no calibration file holds: int8 must stay close to float32 on them too (their activations can leave the
# calibrated ranges: a long run of one token was MiniLM's worst case, cosine 0.87 at min/max ranges).
PROBES = {
    "empty": "",
    "one word": "hello",
    "300 repeated tokens": "x " * 300,
    "mixed scripts": "Ein Hund läuft — собака бежит, 犬が走る, الكلب يركض, ο σκύλος τρέχει 🐕 123",
}


def stress_text(sentences, count, max_tokens):
    """`count` of the most frequent words of `sentences` (alphabetic, first seen first among equals), each repeated
    `max_tokens` times, and `count // 2` runs of consecutive sentences joined to about `max_tokens` words: inputs
    as long and as repetitive as any a tokenizer passes (see `Int8Options.stress_inputs`)."""
    counts = collections.Counter(word for sentence in sentences for word in sentence.split() if word.isalpha())
    words = [word for word, _ in counts.most_common(count)]
    joined, run = [], []
    for sentence in sentences:
        run.append(sentence)
        if sum(len(s.split()) for s in run) >= max_tokens:
            joined.append(" ".join(run))
            run = []
        if len(joined) == count // 2:
            break
    return [" ".join([word] * max_tokens) for word in words] + joined


def calibration_batches(tokenizer, path, count, stress_inputs=0, batch_size=64):
    """Token ids of the first `count` non-empty lines of `path` in batches: `(calibration, held_out)`, the held-out
    ones the last eighth of those lines (at most `HELD_OUT_SENTENCES`; a file of one line calibrates on it and
    measures on it). With `stress_inputs`, a batch of `stress_text` of the calibration lines joins the calibration
    batches."""
    sentences = [line for line in read_lines(path) if line.strip()][:count]
    if not sentences:
        raise ValueError(f"int8 calibration_file {path} has no non-empty line")
    held_out = min(HELD_OUT_SENTENCES, len(sentences) // 8)
    kept, checked = sentences[:len(sentences) - held_out], sentences[len(sentences) - held_out:] or sentences

    def batches(lines):
        return [tokenizer.tokenize(tf.constant(lines[start:start + batch_size]))
                for start in range(0, len(lines), batch_size)]

    stress = stress_text(kept, stress_inputs, int(tokenizer.max_length)) if stress_inputs else []
    return batches(kept) + batches(stress), batches(checked)


def probe_cosines(tokenizer, encoder, packed):
    """`{probe: cosine}` of the int8 `packed` encoder's vector of each of `PROBES` to float32 `encoder`'s."""
    texts = tf.constant(list(PROBES.values()))
    want = l2_normalize(tf.cast(encoder(tokenizer(texts), training=False), tf.float32)).numpy()
    got = l2_normalize(tf.function(packed)(tokenizer.tokenize(texts))).numpy()
    return {name: round(float(cosine), 6) for name, cosine in zip(PROBES, (got * want).sum(axis=1))}


def int8_packed(tokenizer, encoder, calibration_file, calibration_sentences, options=None, streams=None,
                single_sentence=False):
    """The int8 `PackedEncoder` of float32 `encoder`, calibrated on `calibration_file` by `Int8Options` `options`;
    its `int8_report` gains the `probe_cosine` of each of `PROBES`."""
    support = int8_support()
    if support.unsupported:
        raise ValueError(f"Cannot export int8: {support.unsupported} (in gin, inference_module.precision = "
                         "'mixed_bfloat16').")
    logging.info("int8: %s.", support.note)
    if not calibration_file:
        raise ValueError("precision 'int8' needs a calibration_file: a text file of sentences like those the export "
                         "will encode, one a line (bind inference_module.calibration_file, or --calibration_file).")
    reason = packed_support(encoder)
    if reason:
        raise ValueError(f"precision 'int8' runs packed only, and this encoder cannot be packed: {reason}.")
    options = options or Int8Options()
    calibration, held_out = calibration_batches(tokenizer, calibration_file, calibration_sentences,
                                                options.stress_inputs)
    extra = {} if streams is None else {"streams": streams}
    packed = PackedEncoder(encoder, "int8", calibration=calibration, held_out=held_out,
                           int8_options=options, single_sentence=single_sentence, **extra)
    packed.add_to_report(probe_cosine=probe_cosines(tokenizer, encoder, packed))
    return packed


def define_flags():
    """The int8 calibration flags (`--calibration_file`, `--calibration_sentences`, `--int8_*`)."""
    flags.DEFINE_string("calibration_file", None, "int8: text file of sentences like those to encode, one a line "
                        "(in the languages served).")
    flags.DEFINE_integer("calibration_sentences", 2000, "int8: how many of its lines calibrate (the last eighth, at "
                         f"most {HELD_OUT_SENTENCES}, held out to measure the choices).")
    flags.DEFINE_string("int8_smoothing", str(DEFAULT_SMOOTHING), "int8: SmoothQuant alpha, or per_layer (the best of "
                        "several per layer, on the held-out lines).")
    flags.DEFINE_enum("int8_ranges", "minmax", list(RANGES), "int8: activation ranges: observed min/max, a "
                      "percentile, or the range of least squared error.")
    flags.DEFINE_float("int8_percentile", 99.99, "int8: with --int8_ranges=percentile.")
    flags.DEFINE_float("int8_fallback_cosine", None, "int8: budget: the layers (or blocks, matmuls) that lose most run in bfloat16 until "
                       "the held-out sentence vectors' mean cosine to float32 reaches this.")
    flags.DEFINE_integer("int8_max_fallback_layers", None, "int8: at most this many bfloat16 layers (or blocks, matmuls).")
    flags.DEFINE_enum("int8_fallback_unit", "layer", list(FALLBACK_UNITS), "int8: what falls back to bfloat16: "
                      "whole layers, blocks (a layer's attention or feed-forward matmuls, each scored alone) or "
                      "matmuls (attention, or the second feed-forward matmul alone; largest gain first).")
    flags.DEFINE_integer("int8_stress_inputs", 16, "int8: the calibration text's most frequent words, each repeated "
                         "to the longest input, calibrate too (and half as many runs of joined sentences); 0: none.")
    flags.DEFINE_integer("int8_outlier_channels", Int8Options.outlier_channels, "int8: at most this many channels of "
                         "each GELU output, far wider than the rest, stay float32 out of its int8 range; 0: none.")
    flags.DEFINE_enum("int8_gelu_range", Int8Options.gelu_range, list(GELU_RANGES), "int8: the GELU output's range: "
                      "one calibrated range per tensor, or one per token (its own greatest value, found as it runs).")
    flags.DEFINE_enum("int8_attention", "auto", ["auto", *ATTENTION_DTYPES], "int8: dtype of attention between the "
                      "int8 matmuls (float32: long inputs stay closer to float32, a little slower; auto: bfloat16 "
                      "where oneDNN has bfloat16 kernels, else float32).")
    flags.DEFINE_enum("int8_target", Int8Options.target, list(TARGETS), "int8: the CPUs the export is for: native "
                      "(the fastest exact kernels of this CPU) or avx2 (any x86-64 CPU with AVX2: float32 attention "
                      "and outputs, paired weights).")


def options_from_flags(values):
    """The `Int8Options` of parsed `define_flags` flags, with a flag-naming error for a bad value."""
    smoothing = values.int8_smoothing
    if smoothing != "per_layer":
        try:
            smoothing = float(smoothing)
        except ValueError:
            raise ValueError(f"--int8_smoothing={smoothing!r} is neither a number nor per_layer") from None
    return Int8Options(smoothing=smoothing, ranges=values.int8_ranges, percentile=values.int8_percentile,
                       fallback_cosine=values.int8_fallback_cosine,
                       max_fallback_layers=values.int8_max_fallback_layers,
                       attention=None if values.int8_attention == "auto" else values.int8_attention,
                       target=values.int8_target,
                       stress_inputs=values.int8_stress_inputs, fallback_unit=values.int8_fallback_unit,
                       outlier_channels=values.int8_outlier_channels, gelu_range=values.int8_gelu_range)

