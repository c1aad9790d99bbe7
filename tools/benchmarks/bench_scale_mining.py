"""Approximate margin mining at scale against exact mining on a sample: recall, wall time, peak RSS, bytes a vector.

    python tools/benchmarks/make_scale_pools.py ... --size=1000000   # the pools, once
    python tools/benchmarks/bench_scale_mining.py --pools=runs/scale_pools/n1000000 \
        --codes=pq --codes=int8 --codes=binary --codes=float16 --codes=peer

Exact candidates (`tf_msemb.mining.recall.exact_candidates`) of `--sample`
sources and as many targets are the ground truth; the threshold is the one
that maximizes F1 of the sampled sources' exact candidates against the
planted pairs (what a user tunes on gold pairs), and recall is the share of
the exact candidates at or above it that a row keeps. Each row is a fresh
`tf_msemb.mining.sharded.MiningRun` in a process of its own, with the plan
`approximate.plan_for` picks for the pool size (`--cells`, `--probes`,
`--candidates` override it); `peer` is stopes' `OPQ64,IVF<cells>,PQ64`
scored by its codes. Wall time covers training, adding, searching both
ways, margins and max selection.

`--sample_search` builds the same indexes over the whole pools but searches
only the sampled sentences and their neighbours (what their margins need),
giving the same recall without searching every sentence (hours at 10M on 2
cores); the time of a whole run is then projected as the build time plus
the measured seconds a query times 2n queries (an upper bound for
`float16`, whose cells are scored by matrix products shared by the queries
visiting them: a sample's few queries share little).

`--cell_recall` measures the cells alone: for each `--cell_counts`, the
share of the sample's exact candidates (at or above the threshold) whose
partner lies in one of the query's p best cells (p = 16 ... 256), what
probing loses before any codes do, with cells trained as `train_index`
trains them.

`--ranking` measures the codes alone instead: over the first
`--ranking_pool` targets in 64 cells, all probed, how often a source's
exact k nearest are among its best 16 / 32 / 64 / 128 by code (what
`approximate.CANDIDATES` is chosen from).
"""

import json
import os
import shutil
import sys
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.interpreter import run_json
from traffic import peak_rss_mib

flags.DEFINE_string("pools", None, "A make_scale_pools.py output directory (n<size>).")
flags.DEFINE_multi_string("codes", ["pq"], "Rows: codes of tf_msemb.mining.approximate.CODES.")
flags.DEFINE_integer("cells", None, "IVF cells (default: the plan's).")
flags.DEFINE_integer("probes", None, "Cells probed per query (default: the plan's).")
flags.DEFINE_integer("candidates", None, "Candidates re-scored per query (default: the plan's).")
flags.DEFINE_integer("sample", 2000, "Sources (and targets) whose exact candidates are the ground truth.")
flags.DEFINE_integer("k", 4, "Neighbours per direction of the margin.")
flags.DEFINE_integer("shard_size", 1_000_000, "Vectors per index shard and queries per search shard.")
flags.DEFINE_string("work_dir", None, "Where truths and runs go (default: <pools>/bench).")
flags.DEFINE_bool("sample_search", False, "Search only the sample and its neighbours; project the run's time.")
flags.DEFINE_bool("cell_recall", False, "Measure how many exact candidates' partners each cell count probes.")
flags.DEFINE_multi_integer("cell_counts", [2048], "Cell counts --cell_recall measures.")
flags.DEFINE_bool("ranking", False, "Measure how well each codes rank (no mining).")
flags.DEFINE_integer("ranking_pool", 40_000, "Targets the --ranking measurement indexes.")
flags.DEFINE_string("child", "", "Internal: `truth` or the codes of one row; prints JSON.")
flags.mark_flags_as_required(["pools"])
FLAGS = flags.FLAGS


def _work_dir():
    return FLAGS.work_dir or os.path.join(FLAGS.pools, "bench")


def truth():
    """Exact candidates of the sample both ways and the F1-best threshold, saved in `truth.npz`."""
    import numpy as np

    from tf_msemb.evaluation import mining
    from tf_msemb.mining import recall
    from tf_msemb.mining import synthetic

    x, y, pairs, _ = synthetic.read_pools(FLAGS.pools)
    rng = np.random.default_rng(0)
    sample_x = np.sort(rng.choice(len(x), FLAGS.sample, replace=False))
    sample_y = np.sort(rng.choice(len(y), FLAGS.sample, replace=False))
    start = time.perf_counter()
    forward = recall.exact_candidates(x[sample_x], y, x, FLAGS.k)
    backward = recall.exact_candidates(y[sample_y], x, y, FLAGS.k)
    seconds = time.perf_counter() - start
    sampled = set(sample_x.tolist())
    gold = {(int(i), int(j)) for i, j in pairs.tolist() if i in sampled}
    threshold, metrics = mining.best_threshold(
        [(float(s), int(i), int(j)) for s, i, j in zip(forward[0], sample_x, forward[1])], gold)
    np.savez(os.path.join(_work_dir(), "truth.npz"), sample_x=sample_x, sample_y=sample_y,
             forward_scores=forward[0], forward_partners=forward[1], backward_scores=backward[0],
             backward_partners=backward[1], threshold=threshold)
    return {"seconds": seconds, "threshold": threshold, "f1": metrics["f1"], "gold": len(gold)}


def row(codes):
    """One fresh mining run with `codes`, timed, and its recall against the saved truth."""
    import dataclasses

    import numpy as np

    from tf_msemb.mining import approximate
    from tf_msemb.mining import recall
    from tf_msemb.mining import sharded
    from tf_msemb.mining import synthetic

    x, y, pairs, manifest = synthetic.read_pools(FLAGS.pools)
    plan = approximate.plan_for(manifest["size"], codes)
    overrides = {name: getattr(FLAGS, name) for name in ("cells", "probes", "candidates")
                 if getattr(FLAGS, name) is not None}
    plan = dataclasses.replace(plan, **overrides)
    run_dir = os.path.join(_work_dir(), f"{codes}-c{plan.cells}-p{plan.probes}-r{plan.candidates}")
    shutil.rmtree(run_dir, ignore_errors=True)
    with np.load(os.path.join(_work_dir(), "truth.npz")) as saved:
        known = dict(saved)
    start = time.perf_counter()
    run = sharded.MiningRun(x, y, run_dir, {"x": plan, "y": plan}, k=FLAGS.k, shard_size=FLAGS.shard_size)
    if FLAGS.sample_search:
        result = sampled_row(run, known, start)
        result.update(plan=vars(plan), bytes_per_vector=approximate.bytes_per_vector(run.trained_index("y")))
        shutil.rmtree(run_dir, ignore_errors=True)
        return result
    found = run.candidates()
    search_seconds = time.perf_counter() - start
    scores, xs, ys = run.pairs("max", float(known["threshold"]))
    seconds = time.perf_counter() - start
    result = {"seconds": seconds, "search_seconds": search_seconds, "rss_mib": peak_rss_mib(), "pairs": len(scores),
              "plan": vars(plan), "bytes_per_vector": approximate.bytes_per_vector(run.trained_index("y")),
              "planted_found": len(set(zip(xs.tolist(), ys.tolist())) & set(map(tuple, pairs.tolist()))) / len(pairs)}
    for side, name in (("x", "forward"), ("y", "backward")):
        sample = known[f"sample_{side}"]
        result[name] = recall.candidate_recall(known[f"{name}_scores"], known[f"{name}_partners"],
                                               found[side][0][sample], found[side][1][sample], known["threshold"])
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def sampled_row(run, known, start):
    """Recall of `run`'s indexes on the sample alone, its build time and the projected time of a whole run."""
    import numpy as np

    from tf_msemb.evaluation import mining
    from tf_msemb.mining import recall

    for side in ("x", "y"):
        for number in range(len(run.shards[side])):
            run.shard_index(side, number)
    build_seconds = time.perf_counter() - start
    searched, search_start, result = 0, time.perf_counter(), {}
    for side, other, name in (("x", "y", "forward"), ("y", "x", "backward")):
        sims, rows = run.nearest(side, known[f"sample_{side}"])
        neighbours, position = np.unique(np.maximum(rows, 0), return_inverse=True)
        neighbour_means = mining.filled_mean(run.nearest(other, neighbours)[0])[position.reshape(rows.shape)]
        scores, partners = mining.best_candidates(sims, rows, mining.filled_mean(sims),
                                                  np.where(rows >= 0, neighbour_means, np.nan))
        searched += len(rows) + len(neighbours)
        result[name] = recall.candidate_recall(known[f"{name}_scores"], known[f"{name}_partners"], scores, partners,
                                               known["threshold"])
    per_query = (time.perf_counter() - search_start) / searched
    size = len(run.pools["x"]) + len(run.pools["y"])
    result.update(build_seconds=build_seconds, query_ms=1000 * per_query,
                  seconds=build_seconds + per_query * size, rss_mib=peak_rss_mib())
    return result


CELL_PROBES = (16, 32, 64, 128, 256)


def cell_recall():
    """For each cell count and direction: the share of exact candidates whose partner is in the query's p best
    cells, for each p of `CELL_PROBES`."""
    import faiss
    import numpy as np

    from tf_msemb.mining import approximate
    from tf_msemb.mining import synthetic

    x, y, _, manifest = synthetic.read_pools(FLAGS.pools)
    pools = {"x": x, "y": y}
    with np.load(os.path.join(_work_dir(), "truth.npz")) as saved:
        known = dict(saved)
    print("| n a side | cells | direction | train s | partner's cell among the best " +
          " / ".join(map(str, CELL_PROBES)) + " probed |\n|---|---|---|---|---|")
    for cells in FLAGS.cell_counts:
        for side, other, name in (("x", "y", "forward"), ("y", "x", "backward")):
            plan = approximate.SearchPlan("float16", cells, cells, 0, min(manifest["size"], 40 * cells))
            start = time.perf_counter()
            index = approximate.train_index(plan, approximate.training_sample(pools[other], plan))
            seconds = time.perf_counter() - start
            quantizer = faiss.extract_index_ivf(index).quantizer
            wanted = known[f"{name}_scores"] >= known["threshold"]
            _, home = quantizer.search(np.asarray(pools[other][known[f"{name}_partners"][wanted]], np.float32), 1)
            _, probed = quantizer.search(np.asarray(pools[side][known[f"sample_{side}"][wanted]], np.float32),
                                         min(cells, max(CELL_PROBES)))
            shares = [np.mean(np.any(probed[:, :p] == home, axis=1)) for p in CELL_PROBES]
            print(f"| {manifest['size']:,} | {cells:,} | {name} ({int(wanted.sum())}) | {seconds:.0f} | "
                  + " / ".join(f"{100 * share:.2f}" for share in shares) + " |", flush=True)


RANKING_CANDIDATES = (16, 32, 64, 128)


def ranking():
    """For each codes: the share of sources' exact k nearest among their best candidates by code."""
    import numpy as np

    from tf_msemb.evaluation import search
    from tf_msemb.mining import approximate
    from tf_msemb.mining import synthetic

    x, y, _, _ = synthetic.read_pools(FLAGS.pools)
    pool = np.asarray(y[: FLAGS.ranking_pool], np.float32)
    queries = np.asarray(x[: FLAGS.sample], np.float32)
    _, exact = search.exact_knn(queries, pool, FLAGS.k)
    print(f"| codes | bytes/vector | train s | exact {FLAGS.k} nearest among the best " +
          " / ".join(map(str, RANKING_CANDIDATES)) + " by code |\n|---|---|---|---|")
    for codes in FLAGS.codes:
        plan = approximate.SearchPlan(codes, cells=64, probes=64, candidates=0, train_size=len(pool))
        start = time.perf_counter()
        index = approximate.train_index(plan, pool)
        seconds = time.perf_counter() - start
        approximate.add_vectors(index, pool, np.arange(len(pool)))
        approximate.set_probes(index, plan)
        _, rows = index.search(queries, max(RANKING_CANDIDATES))
        shares = [np.mean([len(set(found[:c]) & set(true)) for found, true in zip(rows, exact)]) / FLAGS.k
                  for c in RANKING_CANDIDATES]
        print(f"| {codes} | {approximate.bytes_per_vector(index)} | {seconds:.1f} | "
              + " / ".join(f"{100 * share:.2f}" for share in shares) + " |", flush=True)


def main(argv):
    del argv
    if FLAGS.ranking:
        ranking()
        return
    if FLAGS.child:
        print(json.dumps(truth() if FLAGS.child == "truth" else row(FLAGS.child)))
        return
    os.makedirs(_work_dir(), exist_ok=True)
    own = [a for a in sys.argv[1:] if not a.startswith(("--codes", "--child"))]
    with open(os.path.join(FLAGS.pools, "pools.json")) as f:
        size = json.load(f)["size"]
    if not os.path.exists(os.path.join(_work_dir(), "truth.npz")):
        found = run_json([__file__, *own, "--child=truth"], f"exact candidates at {size}")
        print(f"Exact candidates of {FLAGS.sample} + {FLAGS.sample} sentences in {found['seconds']:.0f} s; threshold "
              f"{found['threshold']:.4f} (F1 {100 * found['f1']:.2f} on {found['gold']} planted pairs)")
    if FLAGS.cell_recall:
        cell_recall()
        return
    if FLAGS.sample_search:
        print("| n a side | codes | cells | probes | re-scored | bytes/vector | build s | ms a query | projected s | "
              "peak RSS MiB (sample) | recall fwd | recall bwd |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    else:
        print("| n a side | codes | cells | probes | re-scored | bytes/vector | wall s | search s | peak RSS MiB | "
              "recall fwd | recall bwd | pairs | planted found |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for codes in FLAGS.codes:
        result = run_json([__file__, *own, f"--child={codes}"], f"{codes} at {size}")
        plan = result["plan"]
        recalls = (f"{100 * result['forward']['recall']:.2f} ({result['forward']['exact']}) | "
                   f"{100 * result['backward']['recall']:.2f} ({result['backward']['exact']})")
        if FLAGS.sample_search:
            print(f"| {size:,} | {codes} | {plan['cells']:,} | {plan['probes']} | {plan['candidates']} | "
                  f"{result['bytes_per_vector']} | {result['build_seconds']:.0f} | {result['query_ms']:.3f} | "
                  f"{result['seconds']:.0f} | {result['rss_mib']:,.0f} | {recalls} |", flush=True)
            continue
        print(f"| {size:,} | {codes} | {plan['cells']:,} | {plan['probes']} | {plan['candidates']} | "
              f"{result['bytes_per_vector']} | {result['seconds']:.0f} | {result['search_seconds']:.0f} | "
              f"{result['rss_mib']:,.0f} | {recalls} | {result['pairs']:,} | {100 * result['planted_found']:.2f} % |",
              flush=True)


if __name__ == "__main__":
    cli.run(main)
