"""Latency of an export by request size, as TF Serving runs it: the curve `export/batching.config` follows.

    python tools/benchmarks/bench_batching.py --model=runs/minilm_int8 --input=../shared/data/multi30k/val.en.gz \
        --intra_op_threads=1

Loads the export in a v1 Session over the `serve` MetaGraph (TF Serving's
loader) and sends, for each `--sizes` batch size, `--requests` requests of
that many random benchmark sentences (`bench_encode.py`'s, after 10 warm-up
requests). Prints p50 and p99 milliseconds, sentences per second at the p50
and the p50 per sentence, then the batching settings that follow
(`traffic.batching_settings`).
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

import serving_session
import traffic
from traffic import batching_settings

serving_session.define_flags()
flags.adopt_module_key_flags(serving_session)  # listed by --help
flags.DEFINE_list("sizes", ["1", "2", "4", "8", "16", "32", "64"], "Batch sizes measured.")
flags.DEFINE_integer("requests", 100, "Timed requests per batch size.")
flags.DEFINE_float("throughput_share", 0.9, "max_batch_size: the smallest batch reaching this share of the best "
                   "sentences/s.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    sentences = serving_session.prepare(FLAGS)
    curve = {}
    with serving_session.serving_session(FLAGS.model) as run:
        for size in map(int, FLAGS.sizes):
            result = traffic.latency(run, sentences, size, FLAGS.requests)
            curve[size] = {"p50_ms": result[f"b{size}_p50_ms"], "p99_ms": result[f"b{size}_p99_ms"]}
    print(f"{FLAGS.model}: TF Serving's Session, intra-op threads {FLAGS.intra_op_threads or 'TF default'}, "
          f"{FLAGS.requests} requests per size")
    print("\n| batch | p50 ms | p99 ms | sentences/s at p50 | p50 ms per sentence |")
    print("|---|---|---|---|---|")
    for size, point in curve.items():
        print(f"| {size} | {point['p50_ms']:.2f} | {point['p99_ms']:.2f} | {size / point['p50_ms'] * 1000:,.0f} | "
              f"{point['p50_ms'] / size:.3f} |")
    settings = batching_settings(curve, FLAGS.throughput_share)
    print(f"\nmax_batch_size {{ value: {settings['max_batch_size']} }}  "
          f"# smallest batch at >= {FLAGS.throughput_share:.0%} of the best sentences/s")
    print(f"batch_timeout_micros {{ value: {settings['batch_timeout_micros']:.0f} }}  # a single sentence's p50")


if __name__ == "__main__":
    cli.run(main)
