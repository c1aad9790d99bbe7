"""Peak memory and time of EMS's bag-of-tokens target (seed 003, Eq. 7): a one-hot `[b, L, V]` sum vs the segment sum.

    python tools/benchmarks/bench_ems_target.py                      # the paper's sizes: b 152, L 120, V 60k + 62
    python tools/benchmarks/bench_ems_target.py --batch=8 --length=16 --vocabulary=1000

Builds the target of one side (EMS builds two per step) from random token
ids with random lengths, three ways, each in a process of its own:
`inputs` (only the ids and mask: the baseline), `one_hot` (the former
`sum(one_hot(ids, V) * mask)`, re-created here) and `segment_sum`
(`tf_msemb.losses.xtr.bag_of_tokens`). Each runs as a `tf.function` on
the CPU, once to trace, then `--repeats` times; the time is the median
call. Memory is the process's peak resident set (`getrusage` ru_maxrss),
shown whole and over the `inputs` baseline. `checksum` is the same for
both targets when they agree. A `one_hot` run that needs more than the
machine's available memory (MemAvailable) is skipped.
"""

import json
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.interpreter import run_json
from traffic import peak_rss_mib
from tf_msemb.text.vocabulary import CONTROL_IDS

VARIANTS = ("inputs", "one_hot", "segment_sum")

flags.DEFINE_integer("batch", 152, "Pairs per replica (the paper's per-GPU batch).")
flags.DEFINE_integer("length", 120, "Tokens per sentence (the paper truncates at 120).")
flags.DEFINE_integer("vocabulary", 60062, "Vocabulary size (60k pieces and 62 <2xx> tokens in the paper).")
flags.DEFINE_integer("repeats", 5, "Timed calls after the tracing call.")
flags.DEFINE_string("child", "", "Internal: build one variant in this process and print JSON.")
FLAGS = flags.FLAGS

# <pad> <s> </s> of our SentencePiece layout; <unk> is counted.
IGNORE_IDS = CONTROL_IDS


def one_hot_target(token_ids, padding_mask, vocabulary_size):
    """The former bag of tokens: a `[b, L, V]` one-hot, masked and summed over L."""
    import tensorflow as tf

    keep = tf.cast(padding_mask, tf.float32)
    for token in IGNORE_IDS:
        keep = keep * tf.cast(tf.not_equal(token_ids, token), tf.float32)
    counts = tf.reduce_sum(tf.one_hot(token_ids, vocabulary_size, dtype=tf.float32) * keep[..., None], axis=1)
    return counts / tf.maximum(tf.reduce_sum(counts, axis=-1, keepdims=True), 1.0)


def run_child(variant):
    """Builds the target with `variant`; prints seconds, peak RSS and a checksum as JSON."""
    import numpy as np
    import tensorflow as tf

    from tf_msemb.losses.xtr import bag_of_tokens

    rng = np.random.default_rng(0)
    b, length, vocabulary_size = FLAGS.batch, FLAGS.length, FLAGS.vocabulary
    lengths = rng.integers(2, length + 1, size=b)
    mask = np.arange(length) < lengths[:, None]
    ids = np.where(mask, rng.integers(1, vocabulary_size, size=(b, length)), 0).astype(np.int32)
    ids[:, 0] = 2
    ids[np.arange(b), lengths - 1] = 3
    token_ids, padding_mask = tf.constant(ids), tf.constant(mask)
    result = {"variant": variant, "seconds": None, "checksum": None}
    if variant != "inputs":
        build = one_hot_target if variant == "one_hot" else (lambda i, m, v: bag_of_tokens(i, m, v, IGNORE_IDS))
        with tf.device("/cpu:0"):
            target = tf.function(lambda i, m: build(i, m, vocabulary_size))
            bag = target(token_ids, padding_mask)
            seconds = []
            for _ in range(FLAGS.repeats):
                start = time.perf_counter()
                bag = target(token_ids, padding_mask).numpy()
                seconds.append(time.perf_counter() - start)
        result["seconds"] = float(np.median(seconds))
        result["checksum"] = float(np.sum(bag @ np.arange(vocabulary_size, dtype=np.float32)))
    result["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(result))


def available_mib():
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) / 1024


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child)
        return
    b, length, vocabulary_size = FLAGS.batch, FLAGS.length, FLAGS.vocabulary
    one_hot_mib = b * length * vocabulary_size * 4 / 2**20
    print(f"one side: batch {b}, length {length}, vocabulary {vocabulary_size}; "
          f"a float32 [b, L, V] tensor is {one_hot_mib:.1f} MiB, the [b, V] target {b * vocabulary_size * 4 / 2**20:.1f} MiB")
    print(f"{'variant':<12} {'seconds':>9} {'peak RSS MiB':>13} {'over inputs MiB':>16} {'checksum':>16}")
    baseline = None
    for variant in VARIANTS:
        # The one-hot and its masked copy live together.
        if variant == "one_hot" and 2 * one_hot_mib > available_mib():
            print(f"{variant:<12} skipped: needs about {2 * one_hot_mib:.0f} MiB, {available_mib():.0f} MiB available")
            continue
        command = [__file__, f"--child={variant}", f"--batch={b}", f"--length={length}",
                   f"--vocabulary={vocabulary_size}", f"--repeats={FLAGS.repeats}"]
        r = run_json(command, f"the {variant} run")
        baseline = r["peak_rss_mib"] if variant == "inputs" else baseline
        seconds = "-" if r["seconds"] is None else f"{r['seconds']:.4f}"
        checksum = "-" if r["checksum"] is None else f"{r['checksum']:.6g}"
        print(f"{variant:<12} {seconds:>9} {r['peak_rss_mib']:>13.0f} {r['peak_rss_mib'] - baseline:>16.0f} "
              f"{checksum:>16}", flush=True)


if __name__ == "__main__":
    cli.run(main)
