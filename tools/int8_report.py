"""Where int8 loses: per layer, the cosine of int8 outputs to float32's on held-out calibration text.

    python tools/int8_report.py --model=runs/e5-small --calibration_file=calibration.txt \
        [--calibration_sentences=2000] [--int8_smoothing=per_layer] [--int8_ranges=mse] \
        [--int8_fallback_cosine=0.995] [--int8_gelu_range=token] [--output=report.json]

Calibrates the int8 encoder exactly as `tools/export_pretrained.py
--precision=int8` would with the same flags (`tf_msemb.inference.int8_export`), without
writing an export, and prints a row per layer: the precision and SmoothQuant
alpha chosen, the GELU output channels kept in float32
(`--int8_outlier_channels`), the mean and least token cosine of the layer's
int8 output to float32's on the same float32 input (`isolated`: what this layer alone loses)
and of the int8 layers from the embeddings up to it (`cumulative`: where the
error grows); then the held-out sentence vectors' cosine to float32 with every
layer int8 and as exported (fallback applied), and each of `PROBES`
(inputs unlike any calibration text). `--output` writes the report as JSON,
the same one an int8 export keeps in its metadata (`int8_calibration`).
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import json
import time

from absl import flags

from tf_msemb.inference import int8_export as int8_flags
from tf_msemb.models.encoder import ensure_built
from tf_msemb.inference.int8_calibration import describe_fallback
from tf_msemb.inference.int8_calibration import UNIT_LABELS
from tf_msemb.inference.int8_calibration import describe_outliers
from tf_msemb.models.pretrained import load_pretrained

flags.DEFINE_string("model", None, "A load_pretrained name, local directory or keras-hub preset.")
flags.DEFINE_integer("max_length", None, "Token limit (default: the model's own).")
flags.DEFINE_string("output", None, "Write the report as JSON here.")
int8_flags.define_flags()
flags.mark_flags_as_required(["model", "calibration_file"])
FLAGS = flags.FLAGS


_UNIT_HEADINGS = {"block": "  block isolated means", "matmul": "  isolated mean gained in the fallback dtype"}


def format_report(report):
    """The report as text: a row per layer, then the sentence and probe cosines."""
    lines = [f"{'layer':>5} {'precision':>22} {'alpha':>5} {'float32 channels':>16} {'isolated mean':>13} {'min':>8} "
             f"{'cumulative mean':>15} {'min':>8}" + _UNIT_HEADINGS.get(report.get("fallback_unit"), "")]
    for layer in report["layers"]:
        isolated, cumulative = layer["isolated_cosine"], layer["cumulative_cosine"]
        blocks = "".join(f"  {UNIT_LABELS[block]} {entry['isolated_cosine']['mean']:.6f}"
                         for block, entry in layer.get("blocks", {}).items())
        blocks += "".join(f"  {UNIT_LABELS[name]} {entry['fallback_cosine']['mean'] - isolated['mean']:+.6f}"
                          for name, entry in layer.get("matmuls", {}).items())
        channels = ",".join(map(str, layer.get("outlier_channels") or [])) or "-"
        lines.append(f"{layer['layer']:>5} {layer['precision']:>22} {layer['smoothing']:>5} {channels:>16} "
                     f"{isolated['mean']:>13.6f} {isolated['min']:>8.4f} {cumulative['mean']:>15.6f} "
                     f"{cumulative['min']:>8.4f}{blocks}")
    sentences = report["sentence_cosine"]
    lines.append(f"held-out sentences ({report['held_out_sentences']}), cosine to float32: every layer int8 mean "
                 f"{sentences['all_int8']['mean']:.6f} min {sentences['all_int8']['min']:.4f}; as exported "
                 f"({report['fallback_dtype']} {describe_fallback(report)}; float32 GELU channels {describe_outliers(report)}) mean "
                 f"{sentences['exported']['mean']:.6f} min {sentences['exported']['min']:.4f}")
    lines += [f"probe {name!r}: cosine {cosine:.4f}" for name, cosine in report["probe_cosine"].items()]
    return "\n".join(lines)


def main(argv):
    del argv
    options = int8_flags.options_from_flags(FLAGS)
    tokenizer, encoder = load_pretrained(FLAGS.model, max_length=FLAGS.max_length)
    started = time.perf_counter()
    packed = int8_flags.int8_packed(tokenizer, ensure_built(encoder), FLAGS.calibration_file,
                                    FLAGS.calibration_sentences, options)
    report = packed.int8_report
    print(format_report(report))
    print(f"calibration: {time.perf_counter() - started:.0f} s")
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump({"model": FLAGS.model, **report}, f, indent=2)


if __name__ == "__main__":
    cli.run(main)
