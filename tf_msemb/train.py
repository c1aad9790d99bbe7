"""Command-line training: `python -m tf_msemb.train --gin_file=configs/X.gin --model_dir=D`.

`--gin_param` overrides single bindings; `--smoke` shrinks any recipe to a
seconds-long run (tiny model, few steps) to check a config end to end;
`--cpu_devices=N` splits the CPU into N logical devices so multi-replica
strategies can be tried without accelerators.
"""

import os
import sys

import gin
from absl import app
from absl import flags
from absl import logging

from tf_msemb import configurables  # noqa: F401  (registers every configurable)
from tf_msemb.training.strategy import split_cpu
from tf_msemb.training.trainer import train

flags.DEFINE_multi_string("gin_file", [], "Gin config files, applied in order.")
flags.DEFINE_multi_string("gin_param", [], "Gin bindings, e.g. 'train.num_steps = 100'.")
flags.DEFINE_string("model_dir", None, "Output directory (checkpoints, logs, export).")
flags.DEFINE_bool("smoke", False, "Shrink the recipe to a smoke run.")
flags.DEFINE_integer("cpu_devices", 0, "Split the CPU into this many logical devices.")
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS

SMOKE_BINDINGS = (
    "train.num_steps = 3",
    "train.global_batch_size = 8",
    "train.log_every = 1",
    "SentenceEncoder.num_layers = 1",
    "SentenceEncoder.hidden_dim = 32",
    "SentenceEncoder.num_heads = 2",
    "SentenceEncoder.intermediate_dim = 64",
    "make_dataset.shuffle_buffer = 64",
)


def parse_config(gin_files, gin_params, smoke=False):
    """Parses gin files and bindings; a bad binding becomes one readable error."""
    for path in gin_files:
        if not os.path.exists(path):
            raise SystemExit(f"error: gin file not found: {path}")
    bindings = list(gin_params) + (list(SMOKE_BINDINGS) if smoke else [])
    try:
        gin.parse_config_files_and_bindings(gin_files, bindings)
    except Exception as e:  # gin raises many types (ValueError, TokenError, IOError, ...)
        message = " ".join(str(e).split())
        raise SystemExit(f"error: bad gin configuration: {message}") from None


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    if FLAGS.cpu_devices:
        split_cpu(FLAGS.cpu_devices)
    parse_config(FLAGS.gin_file, FLAGS.gin_param, FLAGS.smoke)
    train(FLAGS.model_dir)


if __name__ == "__main__":
    sys.exit(app.run(main))
