"""Mining on one machine against the Beam pipeline on 1 and 2 workers: wall time, sentences/s, peak RSS.

    python tools/benchmarks/bench_beam_mining.py --size=100000 --index=exact --workers=1 --workers=2
    python tools/benchmarks/bench_beam_mining.py --size=1000000 --index=ivf --nlist=2000 --nprobe=8 --sample=80000

Two pools of `--size` float16 vectors (`--dim`; half of the targets are
noisy copies of sources, the rest random) are written as encode-pipeline
outputs of `--num_shards` shards under `--work_dir` (kept for reruns). Each
row then mines them, ratio margin and max selection, in a process of its
own: `one machine` runs `evaluation.mining.mine` as `tools/mine_bitext.py`
does after encoding (the same search, `chunk_size` 50,000); `beam, N
workers` runs `tf_msemb.pipelines.mine` on DirectRunner's multi_processing
mode with N worker processes. Peak RSS is the launching process' and the
largest worker's. The last columns compare each Beam row's pairs with the
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

flags.DEFINE_multi_integer("size", [100_000], "Sentences per side.")
flags.DEFINE_enum("index", "exact", ["exact", "ivf"], "Search: exact blocks or IVF.")
flags.DEFINE_multi_integer("workers", [1, 2], "Beam worker processes per row.")
flags.DEFINE_integer("num_shards", 8, "Shards per side.")
flags.DEFINE_integer("dim", 384, "Embedding dimension.")
flags.DEFINE_integer("k", 4, "Neighbours per direction.")
flags.DEFINE_integer("nlist", None, "IVF cells (both sides; default about 4 sqrt(n)).")
flags.DEFINE_integer("nprobe", 16, "IVF cells probed per query.")
flags.DEFINE_integer("sample", 100_000, "Vectors per side the Beam IVF cells are trained on.")
flags.DEFINE_bool("one_machine", True, "Run the one-machine row; false: compare with the one a previous run wrote.")
flags.DEFINE_string("work_dir", "runs/bench_beam_mining", "Where pools and mined pairs are written.")
flags.DEFINE_string("child", "", "Internal: `one` or `beam:<workers>` runs one row and prints JSON.")
flags.DEFINE_integer("child_size", 0, "Internal: the pool size of the child row.")
FLAGS = flags.FLAGS


def _pool_dirs(n):
    base = os.path.join(FLAGS.work_dir, f"n{n}_d{FLAGS.dim}")
    return os.path.join(base, "x"), os.path.join(base, "y")


def write_pools(n):
    """The two pools as encoded corpora (skipped when present); target j's source is in `planted.json`."""
    import numpy as np

    from tf_msemb.pipelines import encode

    x_dir, y_dir = _pool_dirs(n)
    if os.path.exists(os.path.join(y_dir, encode.MANIFEST)):
        return
    rng = np.random.default_rng(0)

    def unit(a):
        return a / np.linalg.norm(a, axis=1, keepdims=True)

    x = unit(rng.standard_normal((n, FLAGS.dim), dtype=np.float32))
    copies = n // 2
    y = unit(np.concatenate([x[:copies] + rng.standard_normal((copies, FLAGS.dim), dtype=np.float32) * 0.05,
                             rng.standard_normal((n - copies, FLAGS.dim), dtype=np.float32)]))
    order = rng.permutation(n)
    y = y[order]
    for directory, vectors, name in ((x_dir, x, "x"), (y_dir, y, "y")):
        os.makedirs(directory, exist_ok=True)
        for shard in range(FLAGS.num_shards):
            rows = np.arange(shard, n, FLAGS.num_shards)
            encode.write_shard(os.path.join(directory, encode.shard_name(shard, FLAGS.num_shards)), rows,
                               vectors[rows].astype(np.float16), [f"{name}{i}" for i in rows])
        encode.write_manifest(directory, {"shards": [encode.shard_name(s, FLAGS.num_shards)
                                                     for s in range(FLAGS.num_shards)],
                                          "sentences": n, "dim": FLAGS.dim, "dtype": "float16"})
    planted = {f"y{j}": f"x{int(source)}" for j, source in enumerate(order) if source < copies}
    with open(os.path.join(os.path.dirname(x_dir), "planted.json"), "w") as f:
        json.dump(planted, f)


def _pool(directory):
    """All vectors of an encoded corpus in shard order (float16) and their texts."""
    import numpy as np

    from tf_msemb.pipelines import encode

    shards = [encode.read_shard(path) for path in encode.shard_paths(directory)]
    return np.concatenate([s[1] for s in shards]), [text for s in shards for text in s[2]]


def run_one_machine(n, output):
    from tf_msemb.evaluation import mining

    (x, src), (y, tgt) = map(_pool, _pool_dirs(n))
    start = time.perf_counter()
    pairs = mining.mine(x, y, FLAGS.k, "ratio", "max", None, FLAGS.index, chunk_size=50_000, nprobe=FLAGS.nprobe,
                        nlist=FLAGS.nlist)
    seconds = time.perf_counter() - start
    with open(output, "w") as f:
        for score, i, j in pairs:
            f.write(f"{score:.6f}\t{src[i]}\t{tgt[j]}\n")
    return {"seconds": seconds, "launcher_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_beam(n, workers, output):
    import apache_beam as beam

    from tf_msemb.pipelines.beam_io import pipeline_options
    from tf_msemb.pipelines.beam_io import run
    from tf_msemb.pipelines.mine import MineBitext

    options = pipeline_options(["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"])
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | MineBitext(*_pool_dirs(n), output, FLAGS.k, index=FLAGS.index, nlist=FLAGS.nlist,
                              nprobe=FLAGS.nprobe, sample=FLAGS.sample)
    start = time.perf_counter()
    run(pipeline)
    return {"seconds": time.perf_counter() - start,
            "launcher_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def _output(n, child):
    """Where a row writes its mined pairs."""
    return os.path.join(os.path.dirname(_pool_dirs(n)[0]), f"{child.replace(':', '')}.{FLAGS.index}.tsv")


def _read(path):
    pairs = {}
    with open(path) as f:
        for line in f:
            score, src, tgt = line.rstrip("\n").split("\t")
            pairs[src, tgt] = float(score)
    return pairs


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
    for n in FLAGS.size:
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
