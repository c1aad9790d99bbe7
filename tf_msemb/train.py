"""Command-line training: `python -m tf_msemb.train --gin_file=configs/X.gin --model_dir=D`.

`--gin_param` overrides single bindings; `--smoke` shrinks any recipe to a
seconds-long run (tiny model, few steps) to check a config end to end;
`--cpu_devices=N` splits the CPU into N logical devices so multi-replica
strategies can be tried without accelerators.
"""

import sys

from absl import app
from absl import flags
from absl import logging

from tf_msemb.training.config import parse_config
from tf_msemb.training.strategy import split_cpu
from tf_msemb.training.trainer import train

flags.DEFINE_multi_string("gin_file", [], "Gin config files, applied in order.")
flags.DEFINE_multi_string("gin_param", [], "Gin bindings, e.g. 'train.num_steps = 100'.")
flags.DEFINE_string("model_dir", None, "Output directory (checkpoints, logs, export).")
flags.DEFINE_bool("smoke", False, "Shrink the recipe to a smoke run.")
flags.DEFINE_integer("cpu_devices", 0, "Split the CPU into this many logical devices.")
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS


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
