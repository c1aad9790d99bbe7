"""Teacher vectors' encoding speed: the Keras forward beside the packed path, as `precompute_teacher.py` runs them.

    python tools/benchmarks/bench_teacher.py --teacher=all-MiniLM-L6-v2 \
        --input=../shared/data/multi30k/train.en.gz --limit=4000 \
        [--intra_op_threads=0 --intra_op_threads=1] [--int8_calibration=../shared/data/multi30k/val.en.gz]

The distinct sentences among the first `--limit` lines of each `--input` are
encoded as `add_teacher_vectors` encodes them (`encode_unique`: length-sorted
batches of `--batch_size`), after one untimed pass over every tenth of them
(tracing). Each row runs in a process of its own (threads are a process'
setting, and its peak RSS is its own):

- `keras`: the Keras forward, `encoder(tokenizer(texts))` (`--encoding=keras`);
- `packed`: `packed_embedder`, float32 (the default), once per `--intra_op_threads`;
- `packed int8` with `--int8_calibration`: an int8 `PackedEncoder` calibrated
  on that file's first 2,000 lines, to show whether it stays within the
  0.9999 cosine that teacher targets allow (it is not offered otherwise).

Every row's vectors are compared with the `keras` row's: minimum cosine and
the largest absolute difference.
"""

import json
import os
import tempfile
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import numpy as np
from absl import flags

import traffic
from tf_msemb.interpreter import run_json

ROWS = ("keras", "packed", "int8")

flags.DEFINE_string("teacher", "all-MiniLM-L6-v2", "Teacher: a load_pretrained name, directory or keras-hub preset.")
flags.DEFINE_multi_string("input", [], "Text files of sentences, one a line (default: the quickstart English corpus).")
flags.DEFINE_integer("limit", 4000, "Lines taken from each input at most.")
flags.DEFINE_integer("batch_size", 128, "Sentences per batch (precompute_teacher.py's default).")
flags.DEFINE_multi_integer("intra_op_threads", [0], "TensorFlow threads inside one op for the packed rows (0: "
                           "default); repeat for a row per setting.")
flags.DEFINE_string("int8_calibration", None, "A text file to calibrate an int8 row on (none: no int8 row).")
flags.DEFINE_enum("child", None, ROWS, "Internal: measure this row in this process, print JSON.")
flags.DEFINE_integer("threads", 0, "Internal: the child's intra-op threads.")
flags.DEFINE_string("vectors", None, "Internal: where the child saves its vectors.")
FLAGS = flags.FLAGS


def _sentences():
    return list(dict.fromkeys(traffic.benchmark_sentences(FLAGS.input, FLAGS.limit, 0)))


def run_child(row):
    from tf_msemb.data.teacher_vectors import encode_unique
    from tf_msemb.inference.int8_export import int8_packed
    from tf_msemb.inference.packed import packed_embedder
    from tf_msemb.models.teacher import load_teacher
    from tf_msemb.runtime import set_threads

    set_threads(FLAGS.threads)
    import tensorflow as tf

    sentences = _sentences()
    tokenizer, encoder = load_teacher(FLAGS.teacher)
    if row == "keras":
        embed = tf.function(lambda texts: encoder(tokenizer(texts), training=False), reduce_retracing=True)
    elif row == "packed":
        embed = packed_embedder(tokenizer, encoder)
    else:
        embed = packed_embedder(tokenizer, encoder, int8_packed(tokenizer, encoder, FLAGS.int8_calibration, 2000))
    if embed is None:
        raise SystemExit(f"error: {FLAGS.teacher} cannot run packed")
    encode_unique(embed, sentences[::10], {}, FLAGS.batch_size)
    start = time.perf_counter()
    vectors = encode_unique(embed, sentences, {}, FLAGS.batch_size)
    seconds = time.perf_counter() - start
    np.save(FLAGS.vectors, vectors)
    print(json.dumps({"sentences": len(sentences), "sentences_per_second": len(sentences) / seconds,
                      "peak_rss_mib": traffic.peak_rss_mib()}))


def _compare(vectors, reference):
    cosine = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
    return float(cosine.min()), float(np.abs(vectors - reference).max())


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child)
        return
    rows = [("keras", 0)] + [("packed", threads) for threads in dict.fromkeys(FLAGS.intra_op_threads)]
    if FLAGS.int8_calibration:
        rows.append(("int8", FLAGS.intra_op_threads[0]))
    common = [f"--teacher={FLAGS.teacher}", f"--limit={FLAGS.limit}", f"--batch_size={FLAGS.batch_size}",
              *(f"--input={path}" for path in FLAGS.input)]
    if FLAGS.int8_calibration:
        common.append(f"--int8_calibration={FLAGS.int8_calibration}")
    with tempfile.TemporaryDirectory(prefix="bench_teacher_") as work:
        results = []
        for index, (row, threads) in enumerate(rows):
            path = os.path.join(work, f"{index}.npy")
            result = run_json([__file__, f"--child={row}", f"--threads={threads}", f"--vectors={path}", *common],
                              f"the {row} row")
            results.append((row, threads, result, np.load(path)))
    reference = results[0][3]
    print(f"{FLAGS.teacher}: {results[0][2]['sentences']} distinct sentences, batches of {FLAGS.batch_size}")
    print(f"{'path':<20} {'sentences/s':>11} {'x keras':>8} {'min cos':>9} {'max |diff|':>10} {'peak RSS MiB':>12}")
    for row, threads, result, vectors in results:
        name = f"{'packed int8' if row == 'int8' else row}" + (f" intra {threads or 'TF'}" if row != "keras" else "")
        low, diff = _compare(vectors, reference)
        speed = result["sentences_per_second"]
        print(f"{name:<20} {speed:>11.1f} {speed / results[0][2]['sentences_per_second']:>8.2f} {low:>9.6f} "
              f"{diff:>10.2e} {result['peak_rss_mib']:>12.0f}")


if __name__ == "__main__":
    cli.run(main)
