"""Encoding throughput of an exported model: sentences per second and peak RSS.

    python tools/bench_encode.py --model=runs/minilm_export \
        --input=../shared/data/multi30k/val.en.gz --batch_size=64 --max_words=32

Sentences (the first `--limit` lines of each `--input`, cut to `--max_words`
words; the quickstart English corpus by default) are encoded as
`tf_msemb.evaluate` encodes them: raw strings into the SavedModel, batches of
`--batch_size` in order of length. One warm-up pass traces the serving
function; the next `--passes` are timed. Runs in its own process, so the
peak RSS is the encoder's own.
"""

import json
import os
import resource
import subprocess
import sys
import time

from absl import app
from absl import flags

flags.DEFINE_string("model", None, "Export directory or training model_dir.")
flags.DEFINE_multi_string("input", [], "Text files of sentences, one a line (default: the quickstart English corpus).")
flags.DEFINE_integer("limit", 5000, "Sentences taken from each input at most.")
flags.DEFINE_integer("max_words", 0, "Cut every sentence to this many words (0: keep whole).")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch.")
flags.DEFINE_integer("passes", 2, "Timed passes over the sentences.")
flags.DEFINE_bool("child", False, "Internal: measure in this process and print JSON.")
flags.mark_flag_as_required("model")
FLAGS = flags.FLAGS


def benchmark_sentences(inputs, limit, max_words):
    """The sentences to encode: up to `limit` lines of each input, each cut to `max_words` words."""
    from tf_msemb.data.text_files import read_lines
    from tf_msemb.quickstart import CORPUS_DIR

    inputs = inputs or [os.path.join(CORPUS_DIR, f"{split}.en.txt") for split in ("train", "heldout")]
    sentences = [line for path in inputs for line in read_lines(path)[:limit]]
    return [" ".join(s.split()[:max_words]) if max_words else s for s in sentences]


def run_child():
    from tf_msemb.evaluation.encoding import encode
    from tf_msemb.evaluation.encoding import load_model

    sentences = benchmark_sentences(FLAGS.input, FLAGS.limit, FLAGS.max_words)
    model = load_model(FLAGS.model)
    encode(model, sentences, FLAGS.batch_size, verbose=False)
    start = time.perf_counter()
    for _ in range(FLAGS.passes):
        embeddings = encode(model, sentences, FLAGS.batch_size, verbose=False)
    seconds = time.perf_counter() - start
    print(json.dumps({
        "sentences": len(sentences),
        "mean_words": sum(len(s.split()) for s in sentences) / len(sentences),
        "dim": int(embeddings.shape[1]),
        "sentences_per_second": FLAGS.passes * len(sentences) / seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


def main(argv):
    del argv
    if FLAGS.child:
        run_child()
        return
    command = [sys.executable, __file__, "--child", f"--model={FLAGS.model}", f"--limit={FLAGS.limit}",
               f"--max_words={FLAGS.max_words}", f"--batch_size={FLAGS.batch_size}", f"--passes={FLAGS.passes}"]
    command += [f"--input={path}" for path in FLAGS.input]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: encoding benchmark failed:\n{result.stderr[-2000:]}")
    r = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"{'encoder':<10} {'batch':>6} {'max words':>10} {'sentences':>10} {'words/sent':>11} {'sentences/s':>12} "
          f"{'peak RSS MiB':>13}")
    max_words = FLAGS.max_words or "-"
    print(f"{'tf_msemb':<10} {FLAGS.batch_size:>6} {max_words:>10} {r['sentences']:>10} {r['mean_words']:>11.1f} "
          f"{r['sentences_per_second']:>12.1f} {r['peak_rss_mib']:>13.0f}")


if __name__ == "__main__":
    app.run(main)
