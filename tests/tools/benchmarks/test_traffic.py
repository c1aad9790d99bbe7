import importlib.util
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("traffic", f"{REPO}/tools/benchmarks/traffic.py")
traffic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(traffic)

SENTENCES = [f"sentence {i}" for i in range(100)]


def test_requests_are_the_same_for_both_sides_and_within_the_sizes():
    first = traffic.requests(SENTENCES, 200, 1, 64)
    assert first == traffic.requests(SENTENCES, 200, 1, 64)
    sizes = [len(r) for r in first]
    assert min(sizes) >= 1 and max(sizes) <= 64 and len(set(sizes)) > 30
    assert all(s in SENTENCES for r in first for s in r)


def test_latency_percentiles_time_each_request_of_the_asked_size():
    seen = []

    def embed(request):
        seen.append(len(request))
        time.sleep(0.002 if len(seen) % 10 else 0.02)  # every tenth request is slow: p99 sees it, p50 does not

    result = traffic.latency(embed, SENTENCES, 8, count=50, warmup=10)
    assert set(seen) == {8} and len(seen) == 60
    assert 1.5 < result["b8_p50_ms"] < 10 < result["b8_p99_ms"]


# In a child process: the peak RSS is a high-water mark, and a test worker that has held a model peaked far above
# what these requests add (CI: 6.5 GiB before this test). The child also checks that the peak is the child's own:
# `ru_maxrss` would report this (large) parent's peak, as Linux carries it across fork and exec.
GROWING_TRAFFIC = """
import importlib.util, json, sys
import numpy as np
spec = importlib.util.spec_from_file_location("traffic", sys.argv[1])
traffic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(traffic)
held = []
def embed(request):
    held.append(np.ones(len(request) * 100_000, np.float32))  # memory that grows with every request
result = traffic.varied_traffic(embed, [f"sentence {i}" for i in range(100)], count=60, first=10)
print(json.dumps(dict(result, held=len(held), peak_now=traffic.peak_rss_mib())))
"""


def test_varied_traffic_reads_the_peak_after_the_first_requests_and_after_all():
    out = subprocess.run([sys.executable, "-c", GROWING_TRAFFIC, f"{REPO}/tools/benchmarks/traffic.py"],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result["held"] == 60 and result["requests"] == 60
    assert result["rss_after_all_mib"] > result["rss_after_first_mib"] + 50
    assert result["traffic_sentences_per_second"] > 0
    assert pytest.approx(result["rss_after_all_mib"], abs=5) == result["peak_now"]
