"""Mining throughput on random unit vectors: sentences per second and peak RSS.

    python tools/bench_mining.py --size=100000 --size=1000000 --index=exact --index=ivf

For each size n and index, two pools of n random unit vectors (`--dim`) are
mined as `tools/mine_bitext.py` mines them: k-NN both ways, ratio margin,
max-score selection. The rate is n / wall seconds of the whole mining
(index building included). Pools larger than `--max_exact` are not searched
exactly in full: `--exact_sample` queries are timed against the whole pool
and the full time is extrapolated (marked `est.`). Approximate rows report
recall@1 against exact search for `--recall_sample` queries. Every row runs in
its own process, so its peak RSS is its own.
"""

import json
import resource
import sys
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from child_process import run_json

flags.DEFINE_multi_integer("size", [100_000], "Sentences per side.")
flags.DEFINE_multi_enum("index", ["exact", "ivf"], ["exact", "flat", "ivf", "ivfpq", "hnsw"], "Search kinds to time.")
flags.DEFINE_integer("dim", 384, "Embedding dimension.")
flags.DEFINE_integer("k", 4, "Neighbours per direction.")
flags.DEFINE_integer("nprobe", 16, "Cells visited per query by the ivf indexes.")
flags.DEFINE_integer("max_exact", 200_000, "Largest pool mined exactly in full; larger pools are sampled.")
flags.DEFINE_integer("exact_sample", 5_000, "Queries timed when a pool is too large for full exact search.")
flags.DEFINE_integer("recall_sample", 1_000, "Queries checked against exact search for approximate rows.")
flags.DEFINE_integer("child_size", 0, "Internal: mine one pool size in this process and print JSON.")
flags.DEFINE_string("child_index", "", "Internal: the index of the child run.")
FLAGS = flags.FLAGS


def random_unit_vectors(n, dim, seed, chunk=100_000):
    """`[n, dim]` float32 unit vectors, generated a chunk at a time to bound memory."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, chunk):
        v = rng.standard_normal((min(chunk, n - start), dim), dtype=np.float32)
        out[start : start + len(v)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def run_child(n, index):
    """Mines two random pools of `n` vectors with `index`; prints the measurements as JSON."""
    import numpy as np

    from tf_msemb.evaluation import mining
    from tf_msemb.evaluation import search

    x, y = random_unit_vectors(n, FLAGS.dim, 0), random_unit_vectors(n, FLAGS.dim, 1)
    result = {"size": n, "index": index, "estimated": False}
    exact = index in ("exact", "flat")
    if exact and n > FLAGS.max_exact:
        queries = x[: FLAGS.exact_sample]
        start = time.perf_counter()
        search.knn(queries, y, FLAGS.k, index)
        per_query = (time.perf_counter() - start) / len(queries)
        result |= {"seconds": 2 * n * per_query, "estimated": True}
    else:
        start = time.perf_counter()
        pairs = mining.mine(x, y, FLAGS.k, "ratio", "max", None, index, nprobe=FLAGS.nprobe)
        result |= {"seconds": time.perf_counter() - start, "pairs": len(pairs)}
        if not exact:
            sample = x[: FLAGS.recall_sample]
            _, exact_ids = search.exact_knn(sample, y, 1)
            _, approximate_ids = search.knn(sample, y, 1, index, nprobe=FLAGS.nprobe)
            result["recall@1"] = float(np.mean(exact_ids[:, 0] == approximate_ids[:, 0]))
    result["sentences_per_second"] = n / result["seconds"]
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main(argv):
    del argv
    if FLAGS.child_size:
        run_child(FLAGS.child_size, FLAGS.child_index)
        return
    print(f"{'size':>9} {'index':<6} {'seconds':>10} {'sentences/s':>12} {'recall@1':>9} {'peak RSS MiB':>13}")
    for n in FLAGS.size:
        for index in FLAGS.index:
            command = [sys.executable, __file__, f"--child_size={n}", f"--child_index={index}", f"--dim={FLAGS.dim}",
                       f"--k={FLAGS.k}", f"--nprobe={FLAGS.nprobe}", f"--max_exact={FLAGS.max_exact}",
                       f"--exact_sample={FLAGS.exact_sample}", f"--recall_sample={FLAGS.recall_sample}"]
            r = run_json(command, f"size {n} index {index}")
            seconds = f"{r['seconds']:.1f}" + (" est." if r["estimated"] else "")
            recall = f"{r['recall@1']:.3f}" if "recall@1" in r else "-"
            print(f"{n:>9} {index:<6} {seconds:>10} {r['sentences_per_second']:>12.0f} {recall:>9} "
                  f"{r['peak_rss_mib']:>13.0f}", flush=True)


if __name__ == "__main__":
    cli.run(main)
