"""Adds a teacher's vector of every source sentence to a TFRecord corpus.

    python tools/precompute_teacher.py --teacher=all-MiniLM-L6-v2 \
        --manifest=runs/data/multi30k.manifest.json --output_dir=runs/data_teacher

Batched and length-sorted; each source sentence is encoded once even when it
appears in several language pairs; finished shards are kept, so rerunning
the same command after an interruption continues where it stopped.
`--prompt` puts a prompt before every sentence (e5's `query`), the one the
student trains with (`load_pretrained.prompt`). The teacher runs packed
(`inference.packed.packed_embedder`: the real tokens only, float32, the
Keras forward's vectors within 1e-6) unless `--encoding=keras` or its
encoder cannot be packed (a warning says why). Point
`make_dataset.corpora` at the new manifest and set
`MultilingualDistillation.teacher_dim` to the printed dimension.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags
from absl import logging

from tf_msemb.data.teacher_vectors import add_teacher_vectors
from tf_msemb.inference.packed import packed_embedder
from tf_msemb.inference.packed import packed_support
from tf_msemb.models.teacher import load_teacher

flags.DEFINE_string("teacher", "all-MiniLM-L6-v2", "Teacher: a load_pretrained name, directory (its own pooling and width) or keras-hub preset.")
flags.DEFINE_string("manifest", None, "Manifest of the corpus to extend (from make_tfrecords.py).")
flags.DEFINE_string("output_dir", None, "Where the extended shards and manifest go.")
flags.DEFINE_string("prompt", None, "A prompt name of the teacher's checkpoint or a text, put before every "
                    "sentence (default: its default prompt, if any); use the one the student trains with.")
flags.DEFINE_integer("batch_size", 128, "Sentences per teacher batch.")
flags.DEFINE_enum("encoding", "packed", ["packed", "keras"], "How the teacher encodes: packed (float32 on the real "
                  "tokens only; faster) or the Keras forward (the same vectors).")
flags.mark_flags_as_required(["manifest", "output_dir"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    tokenizer, encoder = load_teacher(FLAGS.teacher, prompt=FLAGS.prompt)
    embed = None
    if FLAGS.encoding == "packed":
        embed = packed_embedder(tokenizer, encoder)
        if embed is None:
            logging.warning("The teacher runs its Keras forward: %s.", packed_support(encoder))
    print(f"The teacher encodes {'packed (float32)' if embed else 'with its Keras forward'}.")
    manifest = add_teacher_vectors(
        FLAGS.manifest, tokenizer, encoder, FLAGS.teacher, FLAGS.output_dir, FLAGS.batch_size, embed=embed
    )
    print(f"Teacher vectors of dim {manifest['teacher']['dim']} added; manifest in {FLAGS.output_dir}")


if __name__ == "__main__":
    cli.run(main)
