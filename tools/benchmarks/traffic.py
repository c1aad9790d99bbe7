"""Serving-like request streams shared by both sides of `bench_encode.py` (NumPy only: the peer imports it too).

`latency` times single requests of a fixed size; `varied_traffic` sends
requests of random sizes and reads the peak RSS after the first few and after
all of them, the growth a server sees when every request has another shape.
Both draw their sentences with a fixed seed, so both sides get the same
requests in the same order. `batching_settings` turns a latency curve by
batch size into TF Serving's batching limits (`bench_batching.py`).
"""

import os
import resource
import sys
import time

import numpy as np

SEED = 20261124


def peak_rss_mib():
    """This process's peak resident set in MiB. On Linux `VmHWM`: `ru_maxrss` carries a parent's peak across fork
    and exec, so a child started by a large parent would report the parent's. macOS gives `ru_maxrss` in bytes."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def benchmark_sentences(inputs, limit, max_words):
    """The sentences to encode: up to `limit` lines of each input, each cut to `max_words` words."""
    from tf_msemb.quickstart import CORPUS_DIR  # ours only: the peer side never calls this
    from tf_msemb.text_files import read_lines

    inputs = inputs or [os.path.join(CORPUS_DIR, f"{split}.en.txt") for split in ("train", "heldout")]
    sentences = [line for path in inputs for line in read_lines(path)[:limit]]
    return [" ".join(s.split()[:max_words]) if max_words else s for s in sentences]


def requests(sentences, count, low, high, seed=SEED):
    """`count` lists of `low`..`high` sentences (sizes uniform, sentences drawn with replacement)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(low, high + 1, size=count)
    return [[sentences[i] for i in rng.integers(0, len(sentences), size=size)] for size in sizes]


def latency(embed, sentences, batch_size, count, warmup=10):
    """p50 and p99 milliseconds of `embed(request)` over `count` requests of `batch_size` sentences."""
    stream = requests(sentences, warmup + count, batch_size, batch_size)
    for request in stream[:warmup]:
        embed(request)
    seconds = []
    for request in stream[warmup:]:
        start = time.perf_counter()
        embed(request)
        seconds.append(time.perf_counter() - start)
    p50, p99 = np.percentile(np.array(seconds) * 1000, [50, 99])
    return {f"b{batch_size}_p50_ms": float(p50), f"b{batch_size}_p99_ms": float(p99)}


def varied_traffic(embed, sentences, count=1000, first=10, low=1, high=64):
    """Peak RSS (MiB) after the first `first` of `count` requests of random sizes `low`..`high`, and after all."""
    stream = requests(sentences, count, low, high, seed=SEED + 1)
    for request in stream[:first]:
        embed(request)
    after_first = peak_rss_mib()
    start = time.perf_counter()
    for request in stream[first:]:
        embed(request)
    seconds = time.perf_counter() - start
    return {"requests": count, "rss_after_first_mib": after_first, "rss_after_all_mib": peak_rss_mib(),
            "traffic_sentences_per_second": sum(map(len, stream[first:])) / seconds}


def batching_settings(curve, throughput_share):
    """`max_batch_size` and `batch_timeout_micros` from `{size: {"p50_ms": ...}}`.

    - `max_batch_size`: the smallest batch whose sentences/s reach `throughput_share` of the best measured;
      larger batches add latency for every request in them and little throughput.
    - `batch_timeout_micros`: a single sentence's p50. A lone request then waits at most as long as it takes to
      encode, so its latency at most doubles, while requests that arrive meanwhile share its batch for
      much less than their own batches would cost.
    """
    rates = {size: size / point["p50_ms"] for size, point in curve.items()}
    best = max(rates.values())
    size = min(size for size, rate in rates.items() if rate >= throughput_share * best)
    return {"max_batch_size": size, "batch_timeout_micros": round(curve[min(curve)]["p50_ms"] * 1000, -2)}
