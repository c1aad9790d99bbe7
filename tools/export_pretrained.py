"""Exports a pretrained encoder (e.g. a teacher) as a raw-string SavedModel.

    python tools/export_pretrained.py --model=all-MiniLM-L6-v2 --output=runs/minilm_export \
        [--precision=mixed_bfloat16] [--nopacked] [--sub_batch_size=32]
    python tools/export_pretrained.py --model=all-MiniLM-L6-v2 --output=runs/minilm_int8 \
        --precision=int8 --calibration_file=my_sentences.txt

The result loads and serves exactly like a training run's `export/final`.
`--precision=mixed_bfloat16` computes in bfloat16 (faster on CPUs with
AVX512-BF16; vectors within cosine ~0.9999 of float32); `--nopacked` runs
inference on padded batches instead of the real tokens only, and
`--sub_batch_size` sets their length-sorted sub-batches (0: off).
`--precision=int8` runs the layers' matmuls on 8-bit integers, calibrated on
the first `--calibration_sentences` lines of `--calibration_file` (see
`tf_msemb.inference.quantization`; needs TensorFlow's oneDNN kernels), as the
`--int8_*` flags say (`tf_msemb.inference.int8_calibration`: SmoothQuant alpha
per layer, percentile or MSE ranges, bfloat16 fallback of the layers that
lose most against a cosine budget); `tools/int8_report.py` shows per layer
what each choice costs.
`--streams` sets how many sub-batches a packed export runs side by side.
`--output_dim` keeps each vector's first dimensions, re-normalized (for a
Matryoshka-trained encoder).
`--prompt` is put before every input inside the export (default: the
checkpoint's `default_prompt_name`'s prompt); `--prompt=` puts none, and the
checkpoint's named prompts stay in the metadata for callers to pick by task
(`python -m tf_msemb.evaluate --task=mteb` does).
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import sys

from absl import flags

from tf_msemb.inference import int8_export as int8_flags
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.inference.packed import INFERENCE_STREAMS
from tf_msemb.models.pretrained import describe_source
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.provenance import portable_command

flags.DEFINE_string("model", None, "A load_pretrained name, local directory or keras-hub preset.")
flags.DEFINE_string("output", None, "Export directory.")
flags.DEFINE_integer("max_length", None, "Token limit (default: the model's own).")
flags.DEFINE_string("prompt", None, "A prompt name of the checkpoint or a text, put before every input inside the "
                    "export (default: the checkpoint's default prompt, if any; --prompt= for none, so that callers "
                    "such as MTEB pick the prompt by task).")
flags.DEFINE_enum("precision", "float32", ["float32", "mixed_bfloat16", "mixed_float16", "int8"], "Compute precision.")
flags.DEFINE_integer("sub_batch_size", 32, "Length-sorted sub-batch size for padded batches (0: off).")
flags.DEFINE_bool("packed", True, "Inference on the real tokens only (--nopacked: padded batches).")
flags.DEFINE_integer("streams", INFERENCE_STREAMS, "Packed: sub-batches run side by side (serve with intra-op threads "
                     "at cores / streams).")
flags.DEFINE_bool("single_sentence", False, "Packed: a request of one sentence takes a branch of its own with far "
                  "fewer ops; in TF Serving's Session batches then run slower (docs/export.md, \"Single requests\").")
flags.DEFINE_integer("output_dim", None, "Keep the first output_dim dimensions of each vector, re-normalized "
                     "(a Matryoshka-trained encoder's nested width; default: all).")
int8_flags.define_flags()
flags.mark_flags_as_required(["model", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    tokenizer, encoder = load_pretrained(FLAGS.model, max_length=FLAGS.max_length, prompt=FLAGS.prompt)
    int8 = {"calibration_file": FLAGS.calibration_file, "calibration_sentences": FLAGS.calibration_sentences,
            "int8": int8_flags.options_from_flags(FLAGS)} if FLAGS.precision == "int8" else {}
    path = export_saved_model(tokenizer, encoder, FLAGS.output, precision=FLAGS.precision,
                              sub_batch_size=FLAGS.sub_batch_size, packed=FLAGS.packed, streams=FLAGS.streams,
                              single_sentence=FLAGS.single_sentence, output_dim=FLAGS.output_dim,
                              provenance={"kind": "pretrained", "source": describe_source(FLAGS.model),
                                          "command": portable_command(["python", *sys.argv])}, **int8)
    print(f"Exported SavedModel: {path}")


if __name__ == "__main__":
    cli.run(main)
