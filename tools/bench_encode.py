"""Encoding throughput of an exported model, beside sentence-transformers' `encode`: sentences/s and peak RSS.

    python tools/bench_encode.py --model=runs/minilm_export \
        --input=../shared/data/multi30k/val.en.gz --batch_size=64 [--peer_python=/path/to/python]

Sentences (the first `--limit` lines of each `--input`, cut to `--max_words`
words; the quickstart English corpus by default) are encoded as
`tf_msemb.evaluate` encodes them: raw strings into the SavedModel, batches of
`--batch_size` in order of length. One warm-up pass traces the serving
function; the next `--passes` are timed. Runs in its own process, so the
peak RSS is the encoder's own.

When `--peer_python` (default: this interpreter) has the optional `bench`
extra (torch, sentence-transformers), the same sentences are also encoded by
`SentenceTransformer(--peer_model).encode` (same batch size, normalized) in a
third process, and the table adds their row, the ratio and the cosine
between the two models' vectors (all-MiniLM-L6-v2 export vs the same model).
Without the extra it prints our row only. `--peer_precision=bfloat16` runs
their side under torch's bfloat16 autocast (like for like with a
`mixed_bfloat16` export; the default is their default, float32).
"""

import json
import os
import resource
import sys
import tempfile
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import numpy as np
from absl import flags

from child_process import run_json
from peer import missing_note
from peer import packaged_minilm
from peer import peer_available
from peer import ratio
from peer import run_peer

flags.DEFINE_string("model", None, "Export directory or training model_dir.")
flags.DEFINE_multi_string("input", [], "Text files of sentences, one a line (default: the quickstart English corpus).")
flags.DEFINE_integer("limit", 5000, "Sentences taken from each input at most.")
flags.DEFINE_integer("max_words", 0, "Cut every sentence to this many words (0: keep whole).")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch.")
flags.DEFINE_integer("passes", 2, "Timed passes over the sentences.")
flags.DEFINE_integer("intra_op_threads", 0, "TensorFlow threads inside one op (0: default); torch gets the same.")
flags.DEFINE_integer("inter_op_threads", 0, "TensorFlow ops run concurrently (0: default).")
flags.DEFINE_string("peer_python", sys.executable, "Interpreter with the `bench` extra for the peer side.")
flags.DEFINE_string("peer_model", None, "sentence-transformers model directory (default: packaged all-MiniLM-L6-v2).")
flags.DEFINE_bool("peer", True, "Run the sentence-transformers side when it is installed.")
flags.DEFINE_enum("peer_precision", "float32", ["float32", "bfloat16"], "Their compute precision (torch autocast).")
flags.DEFINE_string("vectors", None, "Internal: where the child saves its vectors.")
flags.DEFINE_bool("child", False, "Internal: measure in this process and print JSON.")
flags.mark_flag_as_required("model")
FLAGS = flags.FLAGS


def benchmark_sentences(inputs, limit, max_words):
    """The sentences to encode: up to `limit` lines of each input, each cut to `max_words` words."""
    from tf_msemb.text_files import read_lines
    from tf_msemb.quickstart import CORPUS_DIR

    inputs = inputs or [os.path.join(CORPUS_DIR, f"{split}.en.txt") for split in ("train", "heldout")]
    sentences = [line for path in inputs for line in read_lines(path)[:limit]]
    return [" ".join(s.split()[:max_words]) if max_words else s for s in sentences]


def run_child():
    from tf_msemb.evaluation.encoding import encode
    from tf_msemb.evaluation.encoding import load_model
    from tf_msemb.runtime import set_threads

    set_threads(FLAGS.intra_op_threads, FLAGS.inter_op_threads)

    sentences = benchmark_sentences(FLAGS.input, FLAGS.limit, FLAGS.max_words)
    model = load_model(FLAGS.model)
    encode(model, sentences, FLAGS.batch_size, verbose=False)
    start = time.perf_counter()
    for _ in range(FLAGS.passes):
        embeddings = encode(model, sentences, FLAGS.batch_size, verbose=False)
    seconds = time.perf_counter() - start
    if FLAGS.vectors:
        np.save(FLAGS.vectors, embeddings)
    print(json.dumps({
        "sentences": len(sentences),
        "mean_words": sum(len(s.split()) for s in sentences) / len(sentences),
        "dim": int(embeddings.shape[1]),
        "sentences_per_second": FLAGS.passes * len(sentences) / seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


def _cosines(ours, theirs):
    a, b = np.load(ours), np.load(theirs)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return float(cosine.min()), float(cosine.mean())


def _benchmark(work):
    """Runs both sides with their files under `work` and prints the table."""
    ours_vectors, theirs_vectors = os.path.join(work, "ours.npy"), os.path.join(work, "theirs.npy")
    command = [sys.executable, __file__, "--child", f"--model={FLAGS.model}", f"--limit={FLAGS.limit}",
               f"--max_words={FLAGS.max_words}", f"--batch_size={FLAGS.batch_size}", f"--passes={FLAGS.passes}",
               f"--vectors={ours_vectors}", f"--intra_op_threads={FLAGS.intra_op_threads}",
               f"--inter_op_threads={FLAGS.inter_op_threads}"]
    command += [f"--input={path}" for path in FLAGS.input]
    r = run_json(command, "encoding benchmark")
    rows = [("tf_msemb", r)]
    if FLAGS.peer and peer_available(FLAGS.peer_python):
        sentences_file = os.path.join(work, "sentences.txt")
        with open(sentences_file, "w", encoding="utf-8") as f:
            f.writelines(s + "\n" for s in benchmark_sentences(FLAGS.input, FLAGS.limit, FLAGS.max_words))
        theirs = run_peer(FLAGS.peer_python, "encode", f"--model={FLAGS.peer_model or packaged_minilm()}",
                          f"--sentences={sentences_file}", f"--batch_size={FLAGS.batch_size}",
                          f"--passes={FLAGS.passes}", f"--vectors={theirs_vectors}",
                          f"--precision={FLAGS.peer_precision}")
        name = "sentence-transformers" + ("-bf16" if FLAGS.peer_precision == "bfloat16" else "")
        rows.append((name, dict(theirs, mean_words=r["mean_words"])))
    elif FLAGS.peer:
        print(missing_note(FLAGS.peer_python))
    print(f"{'encoder':<26} {'batch':>6} {'max words':>10} {'sentences':>10} {'words/sent':>11} {'sentences/s':>12} "
          f"{'peak RSS MiB':>13}")
    max_words = FLAGS.max_words or "-"
    for name, row in rows:
        print(f"{name:<26} {FLAGS.batch_size:>6} {max_words:>10} {row['sentences']:>10} {row['mean_words']:>11.1f} "
              f"{row['sentences_per_second']:>12.1f} {row['peak_rss_mib']:>13.0f}")
    if len(rows) == 2:
        low, mean = _cosines(ours_vectors, theirs_vectors)
        print(f"ratio tf_msemb / sentence-transformers: "
              f"{ratio(rows[0][1]['sentences_per_second'], rows[1][1]['sentences_per_second'])}; "
              f"cosine of the two models' vectors: min {low:.5f}, mean {mean:.5f}")


def main(argv):
    del argv
    if FLAGS.child:
        run_child()
        return
    with tempfile.TemporaryDirectory(prefix="bench_encode_") as work:
        _benchmark(work)


if __name__ == "__main__":
    cli.run(main)
