"""Mines translation pairs from two monolingual text files with an exported model.

    python tools/mine_bitext.py --model=runs/distill --src=news.de.txt --tgt=news.en.txt \
        --output=mined.de-en.tsv --threshold=1.06 --cache_dir=runs/mining_cache

Writes `score<TAB>src<TAB>tgt` lines, best first, for pairs whose margin
score (Artetxe & Schwenk 2019; see `tf_msemb.evaluation.mining`) is at least
`--threshold`. Each file is deduplicated, then encoded chunk by chunk into an
embedding cache (`--dtype=float16` halves it); rerunning the same command
after an interruption continues after the last finished chunk. Search is
exact (`exact` with TensorFlow, `flat` with faiss) and memory-bounded by
`--chunk_size`, or approximate with
`--index=ivf|ivfpq|hnsw` (`ivfpq` keeps only `--pq_bytes` bytes per vector
in memory). `exact` scores both directions in one pass; `--matmul_dtype=bfloat16`
multiplies in bfloat16 and re-scores the best `k + --candidate_margin`
candidates per sentence in float32.

For millions of sentences a side, `--codes=binary|int4|int8|float16|pq`
mines with `tf_msemb.mining`: IVF cells over compressed codes, each
sentence's best candidates re-scored exactly from the cache, cells and
probes chosen from the pool sizes, in shards under `--cache_dir` that a
rerun after an interruption reuses.
"""

import hashlib
import json
import os

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.text_files import unique_lines
from tf_msemb.evaluation import mining
from tf_msemb.evaluation import search
from tf_msemb.evaluation.embedding_cache import DTYPES
from tf_msemb.evaluation.embedding_cache import cached_embeddings
from tf_msemb.evaluation.embedding_cache import fingerprint
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.encoding import resolve_export
from tf_msemb.mining import approximate
from tf_msemb.mining import sharded

flags.DEFINE_string("model", None, "Export directory or training model_dir.")
flags.DEFINE_string("src", None, "Source-language text file, one sentence a line (plain or .gz).")
flags.DEFINE_string("tgt", None, "Target-language text file, one sentence a line (plain or .gz).")
flags.DEFINE_string("output", None, "TSV of score<TAB>src<TAB>tgt, best first.")
flags.DEFINE_float("threshold", None, "Keep pairs scoring at least this (all selected pairs when unset).")
flags.DEFINE_string("cache_dir", None, "Where embeddings are cached (default: next to --output).")
flags.DEFINE_enum("dtype", "float16", list(DTYPES), "Storage type of the cached embeddings.")
flags.DEFINE_enum("index", "exact", list(search.INDEXES), "Search: exact (TensorFlow) or flat (faiss), or approximate ivf/ivfpq/hnsw.")
flags.DEFINE_enum("matmul_dtype", "float32", list(search.MATMUL_DTYPES),
                  "Exact search's score dtype; bfloat16 re-scores its candidates in float32.")
flags.DEFINE_integer("candidate_margin", 16,
                     "Candidates beyond k re-scored per sentence with --matmul_dtype=bfloat16.")
flags.DEFINE_enum("codes", None, list(approximate.CODES),
                  "Mine at scale with IVF over these codes, re-scored exactly, in resumable shards (overrides --index).")
flags.DEFINE_integer("pq_bytes", 48, "Bytes per vector of the ivfpq codes; must divide the embedding dim.")
flags.DEFINE_integer("nprobe", 16, "Cells visited per query by the ivf indexes.")
flags.DEFINE_integer("k", 4, "Neighbours per direction for the margin.")
flags.DEFINE_enum("margin", "ratio", list(mining.MARGINS), "Margin score.")
flags.DEFINE_enum("selection", "max", list(mining.SELECTIONS), "Candidate selection.")
flags.DEFINE_enum("pick", None, list(mining.PICKS), "Each query's candidate: the cosine nearest (seed 004) or the best "
                  "margin of the k (Artetxe & Schwenk); default: the margin's paper's rule.")
flags.DEFINE_integer("chunk_size", 50_000, "Sentences per encoding chunk and vectors per search chunk.")
flags.DEFINE_integer("batch_size", 64, "Sentences per encoding batch.")
flags.mark_flags_as_required(["model", "src", "tgt", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    search.checked_matmul_dtype(FLAGS.matmul_dtype, FLAGS.index)  # before encoding, not after
    export = resolve_export(FLAGS.model)
    model = load_model(export)
    cache_dir = FLAGS.cache_dir or os.path.join(os.path.dirname(os.path.abspath(FLAGS.output)), "mining_cache")
    embeddings = []
    for side, path in (("src", FLAGS.src), ("tgt", FLAGS.tgt)):
        sentences = unique_lines(path)
        print(f"{side}: {len(sentences)} distinct sentences in {path}")
        cache = os.path.join(cache_dir, f"{os.path.basename(path)}.{FLAGS.dtype}.npy")
        embeddings.append((sentences, cached_embeddings(model, sentences, cache, FLAGS.dtype, FLAGS.chunk_size,
                                                        FLAGS.batch_size, model_id=os.path.abspath(export))))
    (src, x), (tgt, y) = embeddings
    if FLAGS.codes:
        pairs = mine_at_scale(x, y, cache_dir, [fingerprint(src), fingerprint(tgt), os.path.abspath(export)])
    else:
        pairs = mining.mine(x, y, FLAGS.k, FLAGS.margin, FLAGS.selection, FLAGS.threshold, FLAGS.index, FLAGS.pick,
                            chunk_size=FLAGS.chunk_size, verbose=True, nprobe=FLAGS.nprobe, pq_bytes=FLAGS.pq_bytes,
                            matmul_dtype=FLAGS.matmul_dtype, candidate_margin=FLAGS.candidate_margin)
    with open(FLAGS.output, "w", encoding="utf-8") as f:
        for score, i, j in pairs:
            f.write(f"{score:.6f}\t{src[i].replace(chr(9), ' ')}\t{tgt[j].replace(chr(9), ' ')}\n")
    print(f"Wrote {len(pairs)} pairs to {FLAGS.output}")


def mine_at_scale(x, y, cache_dir, identity):
    """`(score, i, j)` pairs of `tf_msemb.mining.sharded.MiningRun` with `--codes`, in a work dir named by `identity`."""
    plans = {side: approximate.plan_for(len(pool), FLAGS.codes, FLAGS.pq_bytes) for side, pool in (("x", x), ("y", y))}
    for side, plan in plans.items():
        print(f"{side} index: {plan.factory(x.shape[1])}, {plan.probes} probed, {plan.candidates} re-scored")
    digest = hashlib.sha1(json.dumps(identity).encode("utf-8")).hexdigest()[:12]
    run = sharded.MiningRun(x, y, os.path.join(cache_dir, f"mine-{FLAGS.codes}-{digest}"), plans, FLAGS.k,
                            FLAGS.margin, FLAGS.pick, verbose=True)
    return list(zip(*(part.tolist() for part in run.pairs(FLAGS.selection, FLAGS.threshold))))


if __name__ == "__main__":
    cli.run(main)
