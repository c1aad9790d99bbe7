"""Writes an export (or a training run's final export) as a sentence-transformers / Hugging Face directory.

    python tools/export_hf.py --model=runs/my_run --output=runs/my_run/hf
    python tools/export_hf.py --model=runs/minilm_export --output=runs/minilm_st

`--model` is an export directory or a training run's `model_dir` (its
`export/final`). The directory loads with
`sentence_transformers.SentenceTransformer(path)`, with transformers'
`AutoModel` / `AutoTokenizer`, and with this package's `load_pretrained`
(`train.pretrained`), and gives the export's vectors
(`tf_msemb.export.st_directory`): the rebuilt Keras model is first checked
against the export itself on a few sentences in several scripts (float32
exports: cosine 0.9999 at least, else it stops). An int8 or bfloat16
export is written with its float32 weights.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.export.reload import checked_parts
from tf_msemb.export.st_directory import write_sentence_transformers

flags.DEFINE_string("model", None, "An export directory, or a training run's model_dir (its export/final).")
flags.DEFINE_string("output", None, "The sentence-transformers directory to write (replaced if it exists).")
flags.mark_flags_as_required(["model", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    parts = checked_parts(FLAGS.model)
    print(parts.check)
    write_sentence_transformers(parts.tokenizer, parts.encoder, FLAGS.output, output_dim=parts.output_dim,
                                metadata=parts.metadata, source=parts.path)
    print(f"Wrote sentence-transformers directory: {FLAGS.output}")


if __name__ == "__main__":
    cli.run(main)
