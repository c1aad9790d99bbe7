"""The Beam pipelines against the one-machine tools on the same inputs: records, vectors, mined pairs.

    python tools/benchmarks/join_sentences.py --input=en:../shared/data/multi30k/train.en.gz \
        --input=de:../shared/data/multi30k/train.de.gz --size=100000 --output_dir=runs/joined100k
    python tools/benchmarks/check_pipelines.py --model=runs/bide_2048/export/70 --src_lang=en --tgt_lang=de \
        --corpus_dir=runs/joined100k --work_dir=runs/check100k

Runs, each as its command line (Beam on DirectRunner, `--workers` worker
processes):
1. `tools/make_tfrecords.py --drop_duplicates` and `pipelines.records` on the
   aligned files: the records must be equal as multisets, the counts too;
2. `tools/mine_bitext.py --index=exact --dtype=float32` on the shuffled
   files (its embedding cache holds the export's vectors) and
   `pipelines.encode --dtype=float32` on each: the vectors of each sentence,
   the largest difference is printed;
3. `pipelines.mine` on the two encoded corpora: the pairs against
   mine_bitext's, and the largest score difference.
Prints one line per check with its wall times.
"""

import collections
import json
import os
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.interpreter import PACKAGE_ROOT
from tf_msemb.interpreter import run

flags.DEFINE_string("model", None, "The export to encode with.")
flags.DEFINE_string("corpus_dir", None, "tools/benchmarks/join_sentences.py's output (<lang>.aligned.txt, <lang>.shuffled.txt).")
flags.DEFINE_string("src_lang", "en", "Source language.")
flags.DEFINE_string("tgt_lang", "de", "Target language.")
flags.DEFINE_string("work_dir", None, "Where every output goes.")
flags.DEFINE_integer("workers", 2, "Beam worker processes.")
flags.DEFINE_integer("num_shards", 8, "Shards of the Beam outputs.")
flags.mark_flags_as_required(["model", "corpus_dir", "work_dir"])
FLAGS = flags.FLAGS


def _run(*command):
    """Runs a command line of this repository; its wall seconds (a failure ends the command with its last error line)."""
    start = time.perf_counter()
    run(command, " ".join(command[:2]), cwd=PACKAGE_ROOT)
    return time.perf_counter() - start


def _beam(module, *args):
    return _run("-m", f"tf_msemb.pipelines.{module}", *args, "--direct_running_mode=multi_processing",
                f"--direct_num_workers={FLAGS.workers}")


def check_records(work):
    import tensorflow as tf

    from tf_msemb.data.corpora import corpus_streams

    inputs = [f"--input={lang}:{FLAGS.corpus_dir}/{lang}.aligned.txt" for lang in (FLAGS.src_lang, FLAGS.tgt_lang)]
    one = _run("tools/make_tfrecords.py", *inputs, f"--output_dir={work}/records_one", "--prefix=c",
               f"--num_shards={FLAGS.num_shards}", "--drop_duplicates")
    beam = _beam("records", *inputs, f"--output_dir={work}/records_beam", "--prefix=c",
                 f"--num_shards={FLAGS.num_shards}")
    records, counts = [], []
    for side in ("one", "beam"):
        manifest = f"{work}/records_{side}/c.manifest.json"
        records.append({pair: collections.Counter(r.numpy() for r in tf.data.TFRecordDataset(files))
                        for pair, (files, _) in corpus_streams(manifest).items()})
        with open(manifest) as f:
            counts.append({p: {k: v for k, v in e.items() if k != "files"} for p, e in json.load(f)["pairs"].items()})
    total = sum(sum(c.values()) for c in records[1].values())
    print(f"records: {total:,} records; equal multisets: {records[0] == records[1]}; equal counts: "
          f"{counts[0] == counts[1]} {counts[1]}; make_tfrecords {one:.1f} s, Beam {beam:.1f} s", flush=True)


def _encoded(directory):
    import numpy as np

    from tf_msemb.pipelines import encode

    shards = [encode.read_shard(path) for path in encode.shard_paths(directory)]
    return dict(zip([t for s in shards for t in s[2]], np.concatenate([s[1] for s in shards])))


def check_encode_and_mine(work):
    import numpy as np

    from tf_msemb.text_files import unique_lines

    files = {side: f"{FLAGS.corpus_dir}/{lang}.shuffled.txt"
             for side, lang in (("src", FLAGS.src_lang), ("tgt", FLAGS.tgt_lang))}
    one = _run("tools/mine_bitext.py", f"--model={FLAGS.model}", f"--src={files['src']}", f"--tgt={files['tgt']}",
               f"--output={work}/mined_one.tsv", f"--cache_dir={work}/cache", "--dtype=float32", "--index=exact")
    seconds = {}
    for side, path in files.items():
        seconds[side] = _beam("encode", f"--model={FLAGS.model}", f"--input={path}", f"--output_dir={work}/{side}",
                              f"--num_shards={FLAGS.num_shards}", "--dtype=float32")
    worst = 0.0
    for side, path in files.items():
        sentences = unique_lines(path)
        cached = np.load(f"{work}/cache/{os.path.basename(path)}.float32.npy", mmap_mode="r")
        vectors = _encoded(f"{work}/{side}")
        assert len(vectors) == len(sentences), (side, len(vectors), len(sentences))
        worst = max(worst, float(np.max(np.abs(np.stack([vectors[s] for s in sentences]) - cached))))
    print(f"encode: {len(vectors):,} sentences a side; largest |beam - export| {worst:.2e}; Beam "
          f"{seconds['src']:.1f} + {seconds['tgt']:.1f} s", flush=True)
    mine = _beam("mine", f"--src={work}/src", f"--tgt={work}/tgt", f"--output={work}/mined_beam.tsv")
    mined = []
    for name in ("one", "beam"):
        with open(f"{work}/mined_{name}.tsv") as f:
            mined.append({tuple(line.rstrip("\n").split("\t")[1:]): float(line.split("\t")[0]) for line in f})
    shared = mined[0].keys() & mined[1].keys()
    diff = max(abs(mined[0][p] - mined[1][p]) for p in shared)
    print(f"mine: {len(mined[1]):,} pairs (Beam), {len(mined[0]):,} (mine_bitext); in one only: "
          f"{len(mined[0].keys() ^ mined[1].keys())}; largest score difference {diff:.2e}; mine_bitext (encoding "
          f"included) {one:.1f} s, Beam mining {mine:.1f} s", flush=True)


def main(argv):
    del argv
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    check_records(FLAGS.work_dir)
    check_encode_and_mine(FLAGS.work_dir)


if __name__ == "__main__":
    cli.run(main)
