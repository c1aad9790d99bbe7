import importlib.util
import re

import pytest

from conftest import REPO
from conftest import run

spec = importlib.util.spec_from_file_location("traffic", f"{REPO}/tools/benchmarks/traffic.py")
traffic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(traffic)


def test_the_batch_limit_is_the_smallest_near_the_best_rate_and_the_wait_one_sentence_s_p50():
    # sentences/s: 250, 400, 800, 1,000, 1,050: 90 % of the best is 945.
    curve = {1: {"p50_ms": 4.0}, 2: {"p50_ms": 5.0}, 8: {"p50_ms": 10.0}, 32: {"p50_ms": 32.0},
             64: {"p50_ms": 64 / 1.05}}
    assert traffic.batching_settings(curve, 0.9) == {"max_batch_size": 32, "batch_timeout_micros": 4000}
    assert traffic.batching_settings(curve, 1.0)["max_batch_size"] == 64
    assert traffic.batching_settings(curve, 0.5)["max_batch_size"] == 8


@pytest.mark.slow  # loads an export in a Session and times 4 batch sizes: about 20 s
def test_a_row_per_size_and_the_settings_that_follow(export, tmp_path):
    out = run([f"{REPO}/tools/benchmarks/bench_batching.py", f"--model={export}", "--requests=5", "--sizes=1,2,4,8"], tmp_path)
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d,]+) \| ([\d.]+) \|$", out, flags=re.M)
    assert [int(row[0]) for row in rows] == [1, 2, 4, 8], out
    assert all(float(p99) >= float(p50) > 0 for _, p50, p99, _, _ in rows)
    size = int(re.search(r"max_batch_size \{ value: (\d+) \}", out).group(1))
    assert size in (1, 2, 4, 8)
    assert int(re.search(r"batch_timeout_micros \{ value: (\d+) \}", out).group(1)) > 0
