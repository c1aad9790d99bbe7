"""Mining on one machine against the Beam pipeline on 1 and 2 workers: wall time, sentences/s, peak RSS.

    python tools/benchmarks/bench_beam_mining.py --size=100000 --codes=exact --workers=1 --workers=2
    python tools/benchmarks/bench_beam_mining.py --pools=runs/scale_pools/n10000000 --codes=binary --workers=2

Two pools of `--size` float16 vectors (`--dim`; half of the targets are
noisy copies of sources, the rest random), or with `--pools` those of
`make_scale_pools.py` (e5-like neighbourhoods, planted pairs), are written
as encode-pipeline outputs of `--num_shards` shards under `--work_dir`
(kept for reruns). Each row then mines them, ratio margin and max
selection, in a process of its own: `one machine` runs
`evaluation.mining.mine` as `tools/mine_bitext.py` does after encoding
(exact; `chunk_size` 50,000), or with `--codes` `mining.sharded.MiningRun`
on the same shards with the same plan (`pipelines.mine.search_plan`);
`beam, N workers` runs `tf_msemb.pipelines.mine` on DirectRunner's
multi_processing mode with N worker processes. Peak RSS is the launching process' and the
largest worker's (`RUSAGE_CHILDREN`: at least the launcher's peak when the worker started, as Linux
carries a parent's peak into its children). The last columns compare each Beam row's pairs with the
one-machine row's: pairs in both, pairs in only one, the largest score
difference over shared pairs, and the share of planted pairs found.
Sentences per second count both pools (2n over the wall time).
"""

import json
import os
import resource
import sys
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.interpreter import run_json
from traffic import peak_rss_mib

flags.DEFINE_multi_integer("size", [100_000], "Sentences per side (random pools; ignored with --pools).")
flags.DEFINE_string("pools", None, "A make_scale_pools.py output directory to mine instead of random pools.")
flags.DEFINE_string("codes", "exact", "exact, or the codes of tf_msemb.mining.approximate.CODES.")
flags.DEFINE_multi_integer("workers", [1, 2], "Beam worker processes per row.")
flags.DEFINE_integer("num_shards", 8, "Shards per side.")
flags.DEFINE_integer("dim", 384, "Embedding dimension.")
flags.DEFINE_integer("k", 4, "Neighbours per direction.")
flags.DEFINE_integer("cells", None, "IVF cells (default: the plan's for the pool size).")
flags.DEFINE_integer("probes", None, "Cells probed per query (default: the plan's).")
flags.DEFINE_integer("candidates", None, "Candidates re-scored per query and pool shard (default: the plan's).")
flags.DEFINE_bool("one_machine", True, "Run the one-machine row; false: compare with the one a previous run wrote.")
flags.DEFINE_string("work_dir", "runs/bench_beam_mining", "Where pools and mined pairs are written.")
flags.DEFINE_string("child", "", "Internal: `one` or `beam:<workers>` runs one row and prints JSON.")
flags.DEFINE_integer("child_size", 0, "Internal: the pool size of the child row.")
FLAGS = flags.FLAGS


def _pool_dirs(n):
    name = f"{os.path.basename(os.path.normpath(FLAGS.pools))}_s{FLAGS.num_shards}" if FLAGS.pools else \
        f"n{n}_d{FLAGS.dim}"
    base = os.path.join(FLAGS.work_dir, name)
    return os.path.join(base, "x"), os.path.join(base, "y")


def _vectors(n):
    """The pools `(x, y)` in float16 (row = id) and `order`, target j's source row (or n for none)."""
    import numpy as np

    if FLAGS.pools:
        from tf_msemb.mining import synthetic

        x, y, pairs, _ = synthetic.read_pools(FLAGS.pools)
        order = np.full(len(y), len(x))
        order[pairs[:, 1]] = pairs[:, 0]
        return x, y, order
    rng = np.random.default_rng(0)

    def unit(a):
        return a / np.linalg.norm(a, axis=1, keepdims=True)

    x = unit(rng.standard_normal((n, FLAGS.dim), dtype=np.float32))
    copies = n // 2
    y = unit(np.concatenate([x[:copies] + rng.standard_normal((copies, FLAGS.dim), dtype=np.float32) * 0.05,
                             rng.standard_normal((n - copies, FLAGS.dim), dtype=np.float32)]))
    order = rng.permutation(n)
    return x.astype(np.float16), y[order].astype(np.float16), np.where(order < copies, order, n)


def write_pools(n):
    """The two pools as encoded corpora (skipped when present); target j's source is in `planted.json`."""
    import numpy as np

    from tf_msemb.pipelines import encode

    x_dir, y_dir = _pool_dirs(n)
    if os.path.exists(os.path.join(y_dir, encode.MANIFEST)):
        return
    x, y, order = _vectors(n)
    for directory, vectors, name in ((x_dir, x, "x"), (y_dir, y, "y")):
        os.makedirs(directory, exist_ok=True)
        for shard in range(FLAGS.num_shards):
            rows = np.arange(shard, len(vectors), FLAGS.num_shards)
            encode.write_shard(os.path.join(directory, encode.shard_name(shard, FLAGS.num_shards)), rows,
                               vectors[rows], [f"{name}{i}" for i in rows])
        encode.write_manifest(directory, {"shards": [encode.shard_name(s, FLAGS.num_shards)
                                                     for s in range(FLAGS.num_shards)],
                                          "sentences": len(vectors), "dim": vectors.shape[1], "dtype": "float16"})
    planted = {f"y{j}": f"x{int(source)}" for j, source in enumerate(order) if source < len(x)}
    with open(os.path.join(os.path.dirname(x_dir), "planted.json"), "w") as f:
        json.dump(planted, f)


def _pool(directory):
    """All vectors of an encoded corpus in shard order (float16) and their texts."""
    import numpy as np

    from tf_msemb.pipelines import encode

    shards = [encode.read_shard(path) for path in encode.shard_paths(directory)]
    return np.concatenate([s[1] for s in shards]), [text for s in shards for text in s[2]]


def _plans(n):
    from tf_msemb.pipelines.encode import read_manifest
    from tf_msemb.pipelines.mine import search_plan

    return {side: search_plan(read_manifest(directory)["sentences"], FLAGS.codes, FLAGS.cells, FLAGS.probes,
                              FLAGS.candidates) for side, directory in zip("xy", _pool_dirs(n))}


def run_one_machine(n, output):
    import numpy as np

    from tf_msemb.evaluation import mining
    from tf_msemb.mining import sharded

    (x, src), (y, tgt) = map(_pool, _pool_dirs(n))
    start = time.perf_counter()
    if FLAGS.codes == "exact":
        pairs = mining.mine(x, y, FLAGS.k, "ratio", "max", None, chunk_size=50_000)
    else:  # ids are rows: the pools in id order, each encode shard `id % num_shards` a shard of the run
        x, y, _ = _vectors(n)
        shards = {side: [np.arange(s, len(pool), FLAGS.num_shards) for s in range(FLAGS.num_shards)]
                  for side, pool in (("x", x), ("y", y))}
        src, tgt = [f"x{i}" for i in range(len(x))], [f"y{j}" for j in range(len(y))]
        run = sharded.MiningRun(x, y, f"{output}.work", _plans(n), FLAGS.k, shards=shards, verbose=True)
        pairs = zip(*(column.tolist() for column in run.pairs("max")))
    seconds = time.perf_counter() - start
    with open(output, "w") as f:
        for score, i, j in pairs:
            f.write(f"{score:.6f}\t{src[i]}\t{tgt[j]}\n")
    return {"seconds": seconds, "launcher_rss_mib": peak_rss_mib()}


def run_beam(n, workers, output):
    import apache_beam as beam

    from tf_msemb.pipelines.beam_io import pipeline_options
    from tf_msemb.pipelines.beam_io import run
    from tf_msemb.pipelines.mine import MineBitext

    options = pipeline_options(["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"])
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | MineBitext(*_pool_dirs(n), output, FLAGS.k, codes=FLAGS.codes, cells=FLAGS.cells,
                              probes=FLAGS.probes, candidates=FLAGS.candidates)
    start = time.perf_counter()
    run(pipeline)
    return {"seconds": time.perf_counter() - start,
            "launcher_rss_mib": peak_rss_mib(),
            "worker_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def _output(n, child):
    """Where a row writes its mined pairs."""
    return os.path.join(os.path.dirname(_pool_dirs(n)[0]), f"{child.replace(':', '')}.{FLAGS.codes}.tsv")


def _read(path):
    pairs = {}
    with open(path) as f:
        for line in f:
            score, src, tgt = line.rstrip("\n").split("\t")
            pairs[src, tgt] = float(score)
    return pairs


def _sizes():
    if not FLAGS.pools:
        return FLAGS.size
    from tf_msemb.mining import synthetic

    return [synthetic.read_pools(FLAGS.pools)[3]["size"]]


def main(argv):
    del argv
    if FLAGS.child:
        n = FLAGS.child_size
        output = _output(n, FLAGS.child)
        if FLAGS.child == "one":
            result = run_one_machine(n, output)
        else:
            result = run_beam(n, int(FLAGS.child.split(":")[1]), output)
        print(json.dumps(dict(result, output=output)))
        return
    own = [a for a in sys.argv[1:] if not a.startswith(("--size", "--workers", "--child", "--one_machine",
                                                         "--noone_machine"))]
    print("| size | run | wall s | sentences/s | launcher RSS MiB | largest worker RSS MiB | pairs | shared with "
          "one machine | only one side | max score diff | planted found |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in _sizes():
        write_pools(n)
        with open(os.path.join(os.path.dirname(_pool_dirs(n)[0]), "planted.json")) as f:
            planted = {(src, tgt) for tgt, src in json.load(f).items()}
        rows = [("one machine", "one")] * FLAGS.one_machine + [(f"beam, {w} worker{'s' * (w > 1)}", f"beam:{w}")
                                                               for w in FLAGS.workers]
        reference = None if FLAGS.one_machine else _read(_output(n, "one"))
        for label, child in rows:
            result = run_json([__file__, *own, f"--child={child}", f"--child_size={n}"], f"{label} at {n}")
            pairs = _read(result["output"])
            reference = pairs if reference is None else reference
            shared = pairs.keys() & reference.keys()
            diff = max((abs(pairs[p] - reference[p]) for p in shared), default=0.0)
            worker = result.get("worker_rss_mib")
            print(f"| {n:,} | {label} | {result['seconds']:.1f} | {2 * n / result['seconds']:,.0f} | "
                  f"{result['launcher_rss_mib']:,.0f} | {'-' if worker is None else f'{worker:,.0f}'} | "
                  f"{len(pairs):,} | {len(shared):,} | {len(pairs.keys() ^ reference.keys()):,} | {diff:.2e} | "
                  f"{len(planted & pairs.keys()) / len(planted):.4f} |", flush=True)


if __name__ == "__main__":
    cli.run(main)
