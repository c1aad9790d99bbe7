"""Adds a teacher's vector of every source sentence to a TFRecord corpus.

    python tools/precompute_teacher.py --teacher=all-MiniLM-L6-v2 \
        --manifest=runs/data/multi30k.manifest.json --output_dir=runs/data_teacher

Batched and length-sorted; each source sentence is encoded once even when it
appears in several language pairs; finished shards are kept, so rerunning
the same command after an interruption continues where it stopped.
`--prompt` puts a prompt before every sentence (e5's `query`), the one the
student trains with (`load_pretrained.prompt`). Point
`make_dataset.corpora` at the new manifest and set
`MultilingualDistillation.teacher_dim` to the printed dimension.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.data.teacher_vectors import add_teacher_vectors
from tf_msemb.models.teacher import load_teacher

flags.DEFINE_string("teacher", "all-MiniLM-L6-v2", "Teacher: a load_pretrained name, directory (its own pooling and width) or keras-hub preset.")
flags.DEFINE_string("manifest", None, "Manifest of the corpus to extend (from make_tfrecords.py).")
flags.DEFINE_string("output_dir", None, "Where the extended shards and manifest go.")
flags.DEFINE_string("prompt", None, "A prompt name of the teacher's checkpoint or a text, put before every "
                    "sentence (default: its default prompt, if any); use the one the student trains with.")
flags.DEFINE_integer("batch_size", 128, "Sentences per teacher batch.")
flags.mark_flags_as_required(["manifest", "output_dir"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    tokenizer, encoder = load_teacher(FLAGS.teacher, prompt=FLAGS.prompt)
    manifest = add_teacher_vectors(
        FLAGS.manifest, tokenizer, encoder, FLAGS.teacher, FLAGS.output_dir, FLAGS.batch_size
    )
    print(f"Teacher vectors of dim {manifest['teacher']['dim']} added; manifest in {FLAGS.output_dir}")


if __name__ == "__main__":
    cli.run(main)
