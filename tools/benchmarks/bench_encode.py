"""Encoding speed of exported models beside sentence-transformers' backends: throughput, latency, memory.

    python tools/benchmarks/bench_encode.py --model=runs/minilm_export [--model=runs/minilm_bf16] \
        --input=../shared/data/multi30k/val.en.gz --batch_size=64 \
        [--peer_python=/path/to/python --peer_backend=torch --peer_backend=openvino-qint8 --peer_threads=1] \
        [--measure=throughput,latency,traffic]

Sentences (the first `--limit` lines of each `--input`, cut to `--max_words`
words; the quickstart English corpus by default) go to every contender, each
measured in a process of its own (so a peak RSS is that contender's own):

- `throughput`: the sentences encoded as `tf_msemb.evaluate` encodes them
  (batches of `--batch_size` in order of length; one untimed warm-up pass,
  then `--passes` timed), sentences/s and peak RSS;
- `latency`: `--latency_requests` single requests of 1 and of 8 sentences
  drawn at random, p50 and p99 milliseconds;
- `traffic`: `--traffic_requests` requests of 1-64 random sentences in a fresh
  process; peak RSS after the first 10 and after all (a server's growth
  when every request has another shape).

Each `--model` is one of our exports (raw strings in), or a LiteRT file of
one (`tools/export_litert.py`, `target=litert`: `ai_edge_litert`'s
interpreter with `--intra_op_threads` as its threads, 0 its default). Each `--peer_backend`
runs `SentenceTransformer.encode` (normalized, same batches) in
`--peer_python` with that backend (`tools/benchmarks/peer_sentence_transformers.py`):
`torch`, `torch-bf16` (CPU autocast), `onnx`, `onnx-qint8` (dynamic int8 for
this CPU's instruction set), `openvino`, `openvino-qint8` (static int8
calibrated offline on the first `--calibration_sentences` benchmark
sentences). The ONNX and OpenVINO backends need sentence-transformers 5.x
with `optimum[onnxruntime]` and `optimum-intel[openvino]` (docs/benchmarks.md). Without
a peer interpreter the table has our rows only.

Every row's vectors are compared with the reference row (the peer's `torch`
float32 row when it runs the same model as the first `--model`: the same
width and a mean cosine above 0.9; else the first model): minimum and mean
cosine, `-` for a row of another width.

`--repeats`: each throughput row is measured in that many fresh processes,
taken in turn over the contenders (so a slow spell of the machine hits every
row alike); the row gives the median and the range of sentences/s. On 2
cores, at TensorFlow's default threads, one process can run 10-15 % faster
or slower than the next.

`--intra_op_threads` may repeat: each model then gets a row per setting
(`intra 1`, `intra TF` for TensorFlow's default). A packed export's
side-by-side sub-batches run fastest with intra-op threads at cores / streams
(docs/benchmarks.md, "Serving threads"). `--peer_threads` may repeat likewise:
a row of each peer backend per setting (`threads 1`, `threads default`).
"""

import hashlib
import json
import os
import sys
import tempfile
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import numpy as np
from absl import flags

from tf_msemb.evaluation.encoding import resolve_export
from tf_msemb.export.model_card import METADATA_FILE
from tf_msemb.cpus import CpuRequirement
from tf_msemb.cpus import require
from tf_msemb.cpus import this_cpu

import traffic
from traffic import benchmark_sentences
from tf_msemb.interpreter import run_json
from peer import BACKENDS
from peer import missing_note
from peer import packaged_minilm
from peer import peer_available
from peer import ratio
from peer import run_peer

MEASURES = ("throughput", "latency", "traffic")

flags.DEFINE_multi_string("model", None, "Export directory or training model_dir (repeat for several).")
flags.DEFINE_multi_string("input", [], "Text files of sentences, one a line (default: the quickstart English corpus).")
flags.DEFINE_integer("limit", 5000, "Sentences taken from each input at most.")
flags.DEFINE_integer("max_words", 0, "Cut every sentence to this many words (0: keep whole).")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch (throughput).")
flags.DEFINE_integer("passes", 2, "Timed passes over the sentences (throughput).")
flags.DEFINE_integer("repeats", 1, "Fresh processes per throughput row, in turn over the rows; the median is shown.")
flags.DEFINE_list("measure", ["throughput", "latency"], f"Which of {', '.join(MEASURES)} to run.")
flags.DEFINE_integer("latency_requests", 200, "Timed requests of each size (latency).")
flags.DEFINE_integer("traffic_requests", 1000, "Requests of 1-64 sentences (traffic).")
flags.DEFINE_multi_integer("intra_op_threads", [0], "TensorFlow threads inside one op (0: default); repeat for a "
                           "row of each model per setting.")
flags.DEFINE_integer("inter_op_threads", 0, "TensorFlow ops run concurrently (0: default).")
flags.DEFINE_string("peer_python", sys.executable, "Interpreter with sentence-transformers for the peer rows.")
flags.DEFINE_string("peer_model", None, "sentence-transformers model directory (default: packaged all-MiniLM-L6-v2).")
flags.DEFINE_multi_enum("peer_backend", ["torch"], BACKENDS, "Peer backends, one row each (repeat).")
flags.DEFINE_multi_integer("peer_threads", [0], "Peer threads inside one op (0: the backend's default); repeat for "
                           "a row of each backend per setting.")
flags.DEFINE_bool("peer", True, "Run the peer rows when sentence-transformers is installed.")
flags.DEFINE_string("peer_work", None, "Where the peer backends' prepared models are kept between runs "
                    "(default: a temporary directory; openvino-qint8's calibration takes minutes).")
flags.DEFINE_integer("calibration_sentences", 300, "openvino-qint8: benchmark sentences its calibration reads.")
flags.DEFINE_string("vectors", None, "Internal: where the child saves its vectors.")
flags.DEFINE_enum("child", None, MEASURES, "Internal: run this measurement of --model in this process, print JSON.")
flags.mark_flag_as_required("model")
FLAGS = flags.FLAGS


def run_child(mode):
    import tensorflow as tf
    from tf_msemb.evaluation.encoding import encode
    from tf_msemb.evaluation.encoding import load_model
    from tf_msemb.runtime import set_threads

    set_threads(FLAGS.intra_op_threads[0], FLAGS.inter_op_threads)
    sentences = benchmark_sentences(FLAGS.input, FLAGS.limit, FLAGS.max_words)
    if _is_litert(FLAGS.model[0]):
        from tf_msemb.export.litert import LiteRTModel

        model = LiteRTModel(FLAGS.model[0], FLAGS.intra_op_threads[0] or None)
    else:
        model = load_model(FLAGS.model[0])
    if mode == "throughput":
        encode(model, sentences, FLAGS.batch_size, verbose=False)
        start = time.perf_counter()
        for _ in range(FLAGS.passes):
            embeddings = encode(model, sentences, FLAGS.batch_size, verbose=False)
        seconds = time.perf_counter() - start
        np.save(FLAGS.vectors, embeddings)
        result = {"sentences": len(sentences), "dim": int(embeddings.shape[1]),
                  "sentences_per_second": FLAGS.passes * len(sentences) / seconds}
    else:
        def embed(request):
            # A LiteRT file takes the list as it is (a string tensor would only be converted back).
            return model(request) if _is_litert(FLAGS.model[0]) else model(tf.constant(request, tf.string)).numpy()

        if mode == "latency":
            result = traffic.latency(embed, sentences, 1, FLAGS.latency_requests)
            result.update(traffic.latency(embed, sentences, 8, FLAGS.latency_requests))
        else:
            result = traffic.varied_traffic(embed, sentences, FLAGS.traffic_requests)
    print(json.dumps(result | {"peak_rss_mib": traffic.peak_rss_mib()}))


def _is_litert(model):
    return model.endswith(".tflite")


def disk_mib(path):
    """Megabytes on disk of a file, or of every file under a directory."""
    if os.path.isfile(path):
        return os.path.getsize(path) / 2**20
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names) / 2**20


def _peer_disk_mib(prepared):
    """A peer's model weights on disk: its backend's file (OpenVINO's `.xml` with its `.bin`), else the safetensors."""
    path = os.path.join(prepared["model"], prepared.get("file_name") or "model.safetensors")
    if not os.path.exists(path):
        return None
    weights = os.path.splitext(path)[0] + ".bin"
    return disk_mib(path) + (disk_mib(weights) if path.endswith(".xml") and os.path.exists(weights) else 0.0)


def _cosines(ours, theirs):
    """`(min, mean)` cosine of two rows' vectors; None when their widths differ (two different models)."""
    a, b = np.load(ours), np.load(theirs)
    if a.shape != b.shape:
        return None, None
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return float(cosine.min()), float(cosine.mean())


def _cell(value, width):
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.5f}"


class Contender:
    """One row: an export of ours or a peer backend, with a `measure(mode, vectors)` that runs in a child."""

    def __init__(self, name, measure, disk=None):
        self.name, self.measure, self.results, self.vectors, self.disk = name, measure, {}, None, disk


def cpu_lines(models):
    """What the figures depend on: the CPU's oneDNN ISA (and cap), TensorFlow's oneDNN rewrites, and a note for each
    of `models` that computes in bfloat16 where this CPU emulates it."""
    kernels = this_cpu()
    where = kernels.where()
    lines = [f"CPU: {where[where.index('(') + 1:-1]}; TensorFlow's oneDNN rewrites "
             f"{'on' if kernels.onednn_opts else 'off'}"]
    for model in models:
        if _is_litert(model):
            continue
        metadata = os.path.join(resolve_export(model), METADATA_FILE)
        record = json.load(open(metadata, encoding="utf-8")) if os.path.exists(metadata) else {}
        precision = record.get("compute_precision")
        # Decided before any model runs here: oneDNN would abort the benchmark on a kernel it lacks.
        require([CpuRequirement.from_json(need) for need in record.get("cpu_requirements") or []],
                f"{model} ({precision})", kernels)
        if precision == "mixed_bfloat16" and kernels.bfloat16_emulated():
            lines.append(f"note: {model} computes in bfloat16, which this CPU emulates (no AVX512-BF16 or AMX): "
                         "slower than float32 on such CPUs (docs/cpus.md)")
    return lines


def _ours():
    common = [f"--limit={FLAGS.limit}", f"--max_words={FLAGS.max_words}", f"--batch_size={FLAGS.batch_size}",
              f"--passes={FLAGS.passes}", f"--latency_requests={FLAGS.latency_requests}",
              f"--traffic_requests={FLAGS.traffic_requests}", f"--inter_op_threads={FLAGS.inter_op_threads}",
              *(f"--input={path}" for path in FLAGS.input)]
    settings = list(dict.fromkeys(FLAGS.intra_op_threads))
    contenders = []
    for model in FLAGS.model:
        name = "tf_msemb" if len(FLAGS.model) == 1 else f"tf_msemb:{os.path.basename(os.path.normpath(model))}"
        for threads in settings:
            suffix = f" intra {threads or 'TF'}" if settings != [0] else ""

            def measure(mode, vectors, model=model, threads=threads):
                return run_json([__file__, f"--child={mode}", f"--model={model}",
                                 f"--vectors={vectors}", f"--intra_op_threads={threads}", *common],
                                f"{mode} of {model}")

            contenders.append(Contender(name + suffix, measure,
                                        disk_mib(model if _is_litert(model) else resolve_export(model))))
    return contenders


def _peers(work, sentences):
    if not FLAGS.peer:
        return []
    if not peer_available(FLAGS.peer_python):
        print(missing_note(FLAGS.peer_python))
        return []
    sentences_file = os.path.join(work, "sentences.txt")
    with open(sentences_file, "w", encoding="utf-8") as f:
        f.writelines(s + "\n" for s in sentences)
    calibration_file = os.path.join(work, "calibration.txt")
    with open(calibration_file, "w", encoding="utf-8") as f:
        f.writelines(s + "\n" for s in sentences[:FLAGS.calibration_sentences])
    source = FLAGS.peer_model or packaged_minilm()
    # A prepared model is reused only for the same source model and calibration sentences.
    key = hashlib.sha256("\n".join([os.path.abspath(source), *sentences[:FLAGS.calibration_sentences]]).encode())
    contenders = []
    for backend in dict.fromkeys(FLAGS.peer_backend):
        output = os.path.join(FLAGS.peer_work or work, f"peer_{backend}_{key.hexdigest()[:12]}")
        prepared = run_peer(FLAGS.peer_python, "prepare", f"--backend={backend}", f"--model={source}",
                            f"--output={output}", f"--sentences={calibration_file}")

        settings = list(dict.fromkeys(FLAGS.peer_threads))
        for threads in settings:
            def measure(mode, vectors, backend=backend, prepared=prepared, threads=threads):
                return run_peer(FLAGS.peer_python, mode, f"--backend={backend}", f"--model={prepared['model']}",
                                f"--file_name={prepared['file_name']}", f"--sentences={sentences_file}",
                                f"--batch_size={FLAGS.batch_size}", f"--passes={FLAGS.passes}",
                                f"--vectors={vectors}", f"--latency_requests={FLAGS.latency_requests}",
                                f"--traffic_requests={FLAGS.traffic_requests}", f"--threads={threads}")

            suffix = f" threads {threads or 'default'}" if settings != [0] else ""
            contenders.append(Contender(f"st:{backend}{suffix}", measure, _peer_disk_mib(prepared)))
    return contenders


def _print_tables(contenders, sentences):
    mean_words = sum(len(s.split()) for s in sentences) / len(sentences)
    max_words = FLAGS.max_words or "-"
    if "throughput" in FLAGS.measure:
        peer = next((c for c in contenders if c.name.split()[0] == "st:torch"), None)
        same_model = peer is not None and (_cosines(contenders[0].vectors, peer.vectors)[1] or 0.0) > 0.9
        reference = peer if same_model else contenders[0]
        spread = f" {'range':>13}" if FLAGS.repeats > 1 else ""
        print(f"{'encoder':<36} {'batch':>6} {'max words':>10} {'sentences':>10} {'words/sent':>11} "
              f"{'sentences/s':>12}{spread} {'peak RSS MiB':>13} {'min cos':>8} {'mean cos':>9}")
        for c in contenders:
            r = c.results["throughput"]
            low, mean = _cosines(c.vectors, reference.vectors)
            runs = f" {min(r['runs']):>6.1f}-{max(r['runs']):<6.1f}" if FLAGS.repeats > 1 else ""
            print(f"{c.name:<36} {FLAGS.batch_size:>6} {max_words:>10} {r['sentences']:>10} {mean_words:>11.1f} "
                  f"{r['sentences_per_second']:>12.1f}{runs} {r['peak_rss_mib']:>13.0f} {_cell(low, 8)} "
                  f"{_cell(mean, 9)}")
        if FLAGS.repeats > 1:
            print(f"(sentences/s: the median of {FLAGS.repeats} processes per row, taken in turn; range: all of them)")
        print(f"(cosines to {reference.name}'s vectors; '-' for a model of another width)")
        ours = [c for c in contenders if c.name.startswith("tf_msemb")]
        theirs = [c for c in contenders if not c.name.startswith("tf_msemb")]
        if theirs:
            best = [max(group, key=lambda c: c.results["throughput"]["sentences_per_second"]) for group in (ours, theirs)]
            print(f"ratio {best[0].name} / {best[1].name} (the fastest of each side): " + ratio(
                *(c.results["throughput"]["sentences_per_second"] for c in best)))
    if "latency" in FLAGS.measure:
        _print_table(contenders, "latency", [(f"b{size} {q} ms", 10, lambda r, key=f"b{size}_{q}_ms": f"{r[key]:.2f}")
                                             for size in (1, 8) for q in ("p50", "p99")]
                     + [("peak RSS MiB", 13, lambda r: f"{r['peak_rss_mib']:.0f}")], disk=True)
    if "traffic" in FLAGS.measure:
        _print_table(contenders, "traffic", [
            ("requests", 9, lambda r: str(r["requests"])),
            ("RSS@10 MiB", 11, lambda r: f"{r['rss_after_first_mib']:.0f}"),
            ("RSS@end MiB", 12, lambda r: f"{r['rss_after_all_mib']:.0f}"),
            ("growth", 7, lambda r: f"{r['rss_after_all_mib'] / r['rss_after_first_mib']:.2f}x"),
            ("sentences/s", 12, lambda r: f"{r['traffic_sentences_per_second']:.1f}"),
        ])


def _print_table(contenders, mode, columns, disk=False):
    """One row per contender from its `mode` results; `columns` are (title, width, result -> cell text); `disk`
    adds the model's size on disk."""
    print("\n" + f"{'encoder':<36}" + "".join(f" {title:>{width}}" for title, width, _ in columns)
          + (f" {'disk MiB':>9}" if disk else ""))
    for c in contenders:
        size = ("-" if c.disk is None else f"{c.disk:.1f}") if disk else None
        print(f"{c.name:<36}" + "".join(f" {cell(c.results[mode]):>{width}}" for _, width, cell in columns)
              + (f" {size:>9}" if disk else ""))


def _benchmark(work):
    """Measures every contender in its own processes and prints the tables."""
    unknown = set(FLAGS.measure) - set(MEASURES)
    if unknown:
        raise SystemExit(f"error: --measure={','.join(sorted(unknown))} is not one of {', '.join(MEASURES)}")
    if FLAGS.repeats < 1:
        raise SystemExit(f"error: --repeats={FLAGS.repeats} must be at least 1")
    sentences = benchmark_sentences(FLAGS.input, FLAGS.limit, FLAGS.max_words)
    print("\n".join(cpu_lines(FLAGS.model)))
    contenders = _ours() + _peers(work, sentences)
    for i, contender in enumerate(contenders):
        contender.vectors = os.path.join(work, f"vectors_{i}.npy")
        for mode in FLAGS.measure:
            contender.results[mode] = contender.measure(mode, contender.vectors)
    if "throughput" in FLAGS.measure:
        runs = [[c.results["throughput"]] for c in contenders]
        for _ in range(FLAGS.repeats - 1):
            for contender, results in zip(contenders, runs):
                results.append(contender.measure("throughput", contender.vectors))
        for contender, results in zip(contenders, runs):
            contender.results["throughput"] = _median_run(results)
    _print_tables(contenders, sentences)


def _median_run(results):
    """The throughput result of median sentences/s (the lower middle one of an even count), with `runs`: every
    run's sentences/s."""
    middle = sorted(results, key=lambda r: r["sentences_per_second"])[(len(results) - 1) // 2]
    return middle | {"runs": [r["sentences_per_second"] for r in results]}


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench_encode_") as work:
        _benchmark(work)


if __name__ == "__main__":
    cli.run(main)
