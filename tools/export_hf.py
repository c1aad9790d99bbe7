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

from tf_msemb.cpus import MachineError
from tf_msemb.export.reload import keras_parts
from tf_msemb.export.reload import rebuild_cosine
from tf_msemb.export.saved_model import check_loadable
from tf_msemb.export.saved_model import resolve_export
from tf_msemb.export.st_directory import write_sentence_transformers

flags.DEFINE_string("model", None, "An export directory, or a training run's model_dir (its export/final).")
flags.DEFINE_string("output", None, "The sentence-transformers directory to write (replaced if it exists).")
flags.mark_flags_as_required(["model", "output"])
FLAGS = flags.FLAGS
# A float32 export and its rebuilt Keras model compute the same function: anything below this is a wrong rebuild.
MIN_COSINE = 0.9999


def main(argv):
    del argv
    path = resolve_export(FLAGS.model)
    tokenizer, encoder, metadata = keras_parts(path)
    output_dim = metadata.get("embedding_dim") if metadata.get("embedding_dim") != metadata.get(
        "full_embedding_dim") else None
    precision = metadata.get("compute_precision", "float32")
    try:
        check_loadable(path)
    except MachineError as e:
        print(f"Not compared with the export ({e}); written from its weights.")
    else:
        cosine = rebuild_cosine(path, tokenizer, encoder, output_dim)
        print(f"The rebuilt model against the export ({precision}): min cosine {cosine:.6f} over the probe sentences.")
        if precision == "float32" and cosine < MIN_COSINE:
            raise ValueError(f"{path}: the model rebuilt from its metadata gives other vectors than the export "
                             f"(cosine {cosine:.6f} < {MIN_COSINE}); not written.")
    write_sentence_transformers(tokenizer, encoder, FLAGS.output, output_dim=output_dim, metadata=metadata,
                                source=path)
    print(f"Wrote sentence-transformers directory: {FLAGS.output}")


if __name__ == "__main__":
    cli.run(main)
