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

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import gin
from absl import flags

from tf_msemb.config import parse_config
from tf_msemb.runtime import set_threads
from tf_msemb.runtime import split_cpu
from tf_msemb.training.strategy import make_strategy
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
    set_threads(FLAGS.intra_op_threads, FLAGS.inter_op_threads)
    if FLAGS.cpu_devices:
        split_cpu(FLAGS.cpu_devices)
    parse_config(FLAGS.gin_file, FLAGS.gin_param, FLAGS.smoke)
    # The strategy named by `train.strategy` is built here, before gin builds the tokenizer (which
    # runs ops): multi-worker collectives must be set up before any op runs.
    kind = gin.get_bindings("train", resolve_references=False).get("strategy", "default")
    train(FLAGS.model_dir, strategy=make_strategy(kind),
          recipe={"gin_files": FLAGS.gin_file, "gin_params": FLAGS.gin_param, "smoke": FLAGS.smoke})


if __name__ == "__main__":
    cli.run(main)
