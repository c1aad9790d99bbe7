"""Writes an export (or a training run's final export) as a keras-hub preset in keras-hub's own classes.

    python tools/export_keras_hub.py --model=runs/my_run --output=runs/my_run/keras_hub
    python tools/export_keras_hub.py --model=runs/e5_export --output=runs/e5_keras_hub

`--model` is an export directory or a training run's `model_dir` (its
`export/final`). The preset loads with keras-hub alone,
`keras_hub.models.TextEmbedder.from_preset(path)`, and with this package's
`load_pretrained` (`train.pretrained`) as a start
(`tf_msemb.export.keras_hub_preset`). It prints the smallest cosine to the
export's model on the probe sentences and lists the sentences keras-hub's
own tokenizer splits otherwise (its BertTokenizer case-folds with NFKC, so
`ß`, full-width or ligature text differ from Hugging Face's tokenizer).
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.export.keras_hub_preset import write_keras_hub_preset
from tf_msemb.export.reload import checked_parts

flags.DEFINE_string("model", None, "An export directory, or a training run's model_dir (its export/final).")
flags.DEFINE_string("output", None, "The keras-hub preset directory to write (replaced if it exists).")
flags.mark_flags_as_required(["model", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    parts = checked_parts(FLAGS.model)
    print(parts.check)
    if parts.output_dim:
        print(f"The export serves the first {parts.output_dim} dimensions; keras-hub's TextEmbedder has no cut, so "
              f"the preset gives all {parts.encoder.output_dim} (slice, then L2-normalize).")
    report = write_keras_hub_preset(parts.tokenizer, parts.encoder, FLAGS.output, metadata=parts.metadata)
    print(f"Wrote keras-hub preset ({report['task']}): {FLAGS.output}")
    print(f"keras-hub's model on our token ids: min cosine {report['weights_cosine']:.6f}; as strings, where its "
          f"tokenizer splits as ours: min cosine {report['cosine']:.6f}.")
    for sentence, cosine in report["differing"].items():
        print(f"  keras-hub's tokenizer splits otherwise (cosine {cosine:.4f}): {sentence[:60]!r}")


if __name__ == "__main__":
    cli.run(main)
