"""Writes an export (or a training run's final export) as one LiteRT file: raw strings in, unit vectors out.

    python tools/export_litert.py --model=runs/my_run --output=runs/my_run/embedder.tflite
    python tools/export_litert.py --model=runs/e5_export --output=e5_int8.tflite --quantization=dynamic_int8
    python tools/export_litert.py --model=runs/e5_export --output=e5.tflite --target=mediapipe

`--model` is an export directory or a training run's `model_dir` (its
`export/final`); its tokenizer, prompt and Matryoshka cut go into the file
(`tf_msemb.export.litert`). `--target=litert` (default) runs in
`ai_edge_litert`'s interpreter with tensorflow-text's TFLite ops registered
(`tf_msemb.export.litert.interpreter`); `--target=mediapipe` in MediaPipe's
`TextEmbedder` (SentencePiece models; MediaPipe has no kernels for the
WordPiece rebuild's ops, so a WordPiece model stops with one `error:` line). Before writing, the file's vectors are compared with the
Keras model's (itself checked against the export) on sentences in several scripts (accents, full-width, empty,
over-long): a float32 file below cosine 0.9999 is not written; an int8
file's cosine is printed.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import os

from absl import flags

from tf_msemb.export import litert
from tf_msemb.export.reload import PROBE_SENTENCES
from tf_msemb.export.reload import checked_parts

flags.DEFINE_string("model", None, "An export directory, or a training run's model_dir (its export/final).")
flags.DEFINE_string("output", None, "The .tflite file to write (replaced if it exists).")
flags.DEFINE_enum("quantization", "none", litert.QUANTIZATIONS, "dynamic_int8: int8 weights, a quarter the size.")
flags.DEFINE_enum("target", "litert", litert.TARGETS, "The runtime whose op names the file uses.")
flags.mark_flags_as_required(["model", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    parts = checked_parts(FLAGS.model)
    print(parts.check)
    expected = litert.keras_vectors(parts.tokenizer, parts.encoder, PROBE_SENTENCES, parts.output_dim)
    with cli.native_logs_off():  # the interpreter's XNNPACK line
        cosine = litert.write_litert(parts.tokenizer, parts.encoder, FLAGS.output, expected, PROBE_SENTENCES,
                                     output_dim=parts.output_dim, quantization=FLAGS.quantization,
                                     target=FLAGS.target)
    size = os.path.getsize(FLAGS.output) / 2**20
    print(f"Wrote {FLAGS.output} ({FLAGS.quantization}, {FLAGS.target}, {size:.1f} MiB): min cosine {cosine:.6f} "
          "to the model over the probe sentences.")


if __name__ == "__main__":
    cli.run(main)
