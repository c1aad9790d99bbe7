"""Exports a pretrained encoder (e.g. a teacher) as a raw-string SavedModel.

    python tools/export_pretrained.py --model=all-MiniLM-L6-v2 --output=runs/minilm_export

The result loads and serves exactly like a training run's `export/final`.
"""

import sys

from absl import app
from absl import flags

from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.pretrained import load_pretrained

flags.DEFINE_string("model", None, "A load_pretrained name, local directory or keras-hub preset.")
flags.DEFINE_string("output", None, "Export directory.")
flags.DEFINE_integer("max_length", None, "Token limit (default: the model's own).")
flags.mark_flags_as_required(["model", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    try:
        tokenizer, encoder = load_pretrained(FLAGS.model, max_length=FLAGS.max_length)
    except (FileNotFoundError, ImportError) as e:
        sys.exit(f"error: {e}")
    print(f"Exported SavedModel: {export_saved_model(tokenizer, encoder, FLAGS.output)}")


if __name__ == "__main__":
    app.run(main)
