"""Mining throughput on random unit vectors: sentences per second and peak RSS.

    python tools/benchmarks/bench_mining.py --size=100000 --size=1000000 \
        --index=exact --index=exact_2way --index=exact_2way_bf16 --index=ivf

For each size n and search kind, two pools of n random unit vectors
(`--dim`) are mined as `tools/mine_bitext.py` mines them: k-NN both ways,
ratio margin, max-score selection. Kinds: `exact` runs two one-way exact
searches (x -> y, then y -> x; mining's search before issue 16.5), as do
`flat` and the approximate indexes; `exact_2way` scores each pair once for
both directions (`search.exact_knn_both`, what mining now runs for `exact`);
`exact_2way_bf16` does so in bfloat16 and re-scores `k + --candidate_margin`
candidates in float32. The rate is n / wall seconds of the whole mining
(index building included). Pools larger than `--max_exact` are not searched
exactly in full (marked `est.`): `exact` and `flat` time `--exact_sample`
queries against the whole pool and scale up; the two-way kinds time
`--exact_sample` and twice as many rows of x against the whole of y and
extrapolate a line through both to n rows (y's share, such as re-scoring
its candidates, is paid once whatever the sample; `extrapolated_seconds`).
Approximate and bfloat16 rows report recall@1 against exact float32 search
for `--recall_sample` queries. Every row runs in its own process, so its
peak RSS is its own.
"""

import json
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.interpreter import run_json
from traffic import peak_rss_mib

ONE_WAY = ("exact", "flat", "ivf", "ivfpq", "hnsw")
TWO_WAY = {"exact_2way": "float32", "exact_2way_bf16": "bfloat16"}  # kind -> matmul_dtype

flags.DEFINE_multi_integer("size", [100_000], "Sentences per side.")
flags.DEFINE_multi_enum("index", ["exact", "exact_2way", "exact_2way_bf16", "ivf"], [*ONE_WAY, *TWO_WAY],
                        "Search kinds to time.")
flags.DEFINE_integer("dim", 384, "Embedding dimension.")
flags.DEFINE_integer("k", 4, "Neighbours per direction.")
flags.DEFINE_integer("nprobe", 16, "Cells visited per query by the ivf indexes.")
flags.DEFINE_integer("candidate_margin", 16, "Candidates beyond k re-scored in float32 by exact_2way_bf16.")
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


def knn_both_ways(x, y, kind):
    """`((sims, ids) of x in y, (sims, ids) of y in x)` by the search `kind`."""
    from tf_msemb.evaluation import search

    if kind in TWO_WAY:
        return search.exact_knn_both(x, y, FLAGS.k, matmul_dtype=TWO_WAY[kind], candidate_margin=FLAGS.candidate_margin)
    return search.knn(x, y, FLAGS.k, kind, nprobe=FLAGS.nprobe), search.knn(y, x, FLAGS.k, kind, nprobe=FLAGS.nprobe)


def timed(function, *args):
    """`(seconds, result)` of `function(*args)`."""
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def extrapolated_seconds(sample, seconds, twice, n):
    """Seconds for `n` rows of x on the line `a + b * rows` fitted to `seconds` (`sample` rows) and `twice`
    (`2 * sample` rows), with y's share `a` and a row's cost `b` kept non-negative.

    Where both timings allow it, that is the line through them. A sample whose
    extra rows cost less than the timing noise (both within one query block)
    can time `twice` under `seconds`: the line through them falls, to negative
    times at large n. Least squares over the lines with `a, b >= 0` then takes
    `b = 0` (the mean of the two: no cost per row measurable); `twice` over
    double `seconds` (negative `a`) takes `a = 0`. Either way the time is
    non-negative and never falls as n grows.
    """
    slope = (twice - seconds) / sample
    intercept = seconds - slope * sample
    if slope < 0:
        intercept, slope = (seconds + twice) / 2, 0.0
    elif intercept < 0:
        intercept, slope = 0.0, (seconds + 2 * twice) / (5 * sample)
    return intercept + slope * n


def run_child(n, kind):
    """Mines two random pools of `n` vectors with `kind`; prints the measurements as JSON."""
    import numpy as np

    from tf_msemb.evaluation import mining
    from tf_msemb.evaluation import search

    x, y = random_unit_vectors(n, FLAGS.dim, 0), random_unit_vectors(n, FLAGS.dim, 1)
    result = {"size": n, "index": kind, "estimated": False}
    if kind in TWO_WAY:
        # Outside the timing: traces the search's TensorFlow function and runs it on thousands of rows, as timed. On
        # 9, top-k takes another branch than on 200: that branch's first run added 0.02 s to the first timing.
        warm = min(n, FLAGS.exact_sample)
        knn_both_ways(x[:warm], y[:warm], kind)
    if kind in ("exact", "flat", *TWO_WAY) and n > FLAGS.max_exact:
        sample = min(FLAGS.exact_sample, n // 2)
        if kind in TWO_WAY:
            seconds, knn = timed(knn_both_ways, x[:sample], y, kind)
            twice, _ = timed(knn_both_ways, x[: 2 * sample], y, kind)
            result["seconds"] = extrapolated_seconds(sample, seconds, twice, n)
        else:
            seconds, _ = timed(search.knn, x[:sample], y, FLAGS.k, kind)
            result["seconds"] = 2 * n * seconds / sample
        result["estimated"] = True
    else:
        def mine():
            knn = knn_both_ways(x, y, kind)
            return knn, mining.select(*mining.candidates_from_knn(*knn, "ratio"), "max")

        result["seconds"], (knn, pairs) = timed(mine)
        result["pairs"] = len(pairs)
    if kind not in ("exact", "flat", "exact_2way"):  # approximate, or exact up to bfloat16's re-score
        (_, forward_ids), _ = knn
        sample = min(FLAGS.recall_sample, len(forward_ids))
        _, exact_ids = search.exact_knn(x[:sample], y, 1)
        result["recall@1"] = float(np.mean(exact_ids[:, 0] == forward_ids[:sample, 0]))
    result["sentences_per_second"] = n / result["seconds"]
    result["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(result))


def main(argv):
    del argv
    if FLAGS.child_size:
        run_child(FLAGS.child_size, FLAGS.child_index)
        return
    print(f"{'size':>9} {'index':<15} {'seconds':>10} {'sentences/s':>12} {'recall@1':>9} {'peak RSS MiB':>13}")
    for n in FLAGS.size:
        for index in FLAGS.index:
            command = [__file__, f"--child_size={n}", f"--child_index={index}", f"--dim={FLAGS.dim}",
                       f"--k={FLAGS.k}", f"--nprobe={FLAGS.nprobe}", f"--candidate_margin={FLAGS.candidate_margin}",
                       f"--max_exact={FLAGS.max_exact}", f"--exact_sample={FLAGS.exact_sample}",
                       f"--recall_sample={FLAGS.recall_sample}"]
            r = run_json(command, f"size {n} index {index}")
            seconds = f"{r['seconds']:.1f}" + (" est." if r["estimated"] else "")
            recall = f"{r['recall@1']:.3f}" if "recall@1" in r else "-"
            print(f"{n:>9} {index:<15} {seconds:>10} {r['sentences_per_second']:>12.0f} {recall:>9} "
                  f"{r['peak_rss_mib']:>13.0f}", flush=True)


if __name__ == "__main__":
    cli.run(main)
