"""Command-line training: `python -m tf_msemb.train --gin_file=configs/X.gin --model_dir=D`.

`--gin_param` overrides single bindings; `--smoke` shrinks any recipe to a
seconds-long run (tiny model, few steps) to check a config end to end;
`--cpu_devices=N` splits the CPU into N logical devices so multi-replica
strategies can be tried without accelerators.

Problems a user can fix (a missing or corrupt file, an empty corpus, an
unknown language tag, a teacher of the wrong width, bad gin, a NaN loss, no
TPU) end the run with one `error: ...` line; `--verbosity=1` shows the
traceback as well.
"""

import sys

from absl import app
from absl import flags
from absl import logging

from tf_msemb.config import parse_config
from tf_msemb.training.errors import one_line
from tf_msemb.training.strategy import configured_strategy
from tf_msemb.runtime import set_threads
from tf_msemb.runtime import split_cpu
from tf_msemb.training.trainer import train

flags.DEFINE_multi_string("gin_file", [], "Gin config files, applied in order.")
flags.DEFINE_multi_string("gin_param", [], "Gin bindings, e.g. 'train.num_steps = 100'.")
flags.DEFINE_string("model_dir", None, "Output directory (checkpoints, logs, export).")
flags.DEFINE_bool("smoke", False, "Shrink the recipe to a smoke run.")
flags.DEFINE_integer("cpu_devices", 0, "Split the CPU into this many logical devices.")
flags.DEFINE_integer("intra_op_threads", 0, "Threads inside one op (0: TensorFlow's default, one per core).")
flags.DEFINE_integer("inter_op_threads", 0, "Ops run concurrently (0: TensorFlow's default).")
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    set_threads(FLAGS.intra_op_threads, FLAGS.inter_op_threads)
    if FLAGS.cpu_devices:
        split_cpu(FLAGS.cpu_devices)
    parse_config(FLAGS.gin_file, FLAGS.gin_param, FLAGS.smoke)
    try:
        # Before gin builds the tokenizer: multi-worker collectives must be set up before any op runs.
        train(FLAGS.model_dir, strategy=configured_strategy())
    except Exception as e:  # noqa: BLE001 -- only errors `one_line` recognizes are shortened
        message = one_line(e)
        if message is None or FLAGS["verbosity"].present:
            raise
        raise SystemExit(f"error: {message}") from None


if __name__ == "__main__":
    sys.exit(app.run(main))
