import json
import re
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import run


def test_the_two_way_estimate_is_the_line_through_both_timings_kept_non_negative_and_non_decreasing():
    """In a process of its own: the tool defines absl flags that tf_msemb.evaluate defines too."""
    cases = [(100, 1.0, 1.5), (200, 0.03, 0.01), (100, 1.0, 3.0), (100, 0.2, 0.2)]
    sizes = [200, 400, 2000, 10**6]
    code = (f"import json, sys; sys.path.insert(0, {REPO + '/tools/benchmarks'!r}); import bench_mining; "
            f"print(json.dumps([[bench_mining.extrapolated_seconds(*case, n) for n in {sizes}] for case in {cases}]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    through, noisy, steep, flat = json.loads(result.stdout.splitlines()[-1])
    # 0.5 s for y, 5 ms a row: the line through (100, 1.0) and (200, 1.5).
    assert through == pytest.approx([1.5, 2.5, 10.5, 0.5 + 5000])
    # Doubling the rows timed faster (noise): the mean, not the falling line (-0.15 s at 2,000 rows).
    assert noisy == pytest.approx([0.02] * 4)
    # Over double the time for double the rows: proportional, least squares through the origin.
    assert steep == pytest.approx([n * 7.0 / 500 for n in sizes])
    assert flat == pytest.approx([0.2] * 4)


@pytest.mark.slow  # a benchmark tool's report, not the package's behaviour: about 20 s
def test_rows_for_exact_sampled_and_approximate_search(tmp_path):
    out = run([f"{REPO}/tools/benchmarks/bench_mining.py", "--size=300", "--size=2000", "--index=exact", "--index=exact_2way",
               "--index=exact_2way_bf16", "--index=ivf", "--dim=16", "--max_exact=1000", "--exact_sample=200",
               "--recall_sample=100", "--nprobe=64"], tmp_path)
    rows = {(m[0], m[1]): m[2:] for m in re.findall(r"^\s*(\d+) (\w+)\s+([\d.]+( est\.)?)\s+(\d+)\s+(\S+)\s+(\d+)$",
                                                        out, flags=re.M)}
    kinds = ("exact", "exact_2way", "exact_2way_bf16", "ivf")
    assert set(rows) == {(size, kind) for size in ("300", "2000") for kind in kinds}, out
    for kind in kinds[:3]:
        assert rows[("300", kind)][1] == "" and rows[("2000", kind)][1] == " est.", kind
    assert rows[("300", "exact")][3] == rows[("300", "exact_2way")][3] == "-"
    # 300 vectors make 7 cells; probing all 64 (capped at 7) is exact search.
    assert float(rows[("300", "ivf")][3]) == 1.0
    assert 0.0 <= float(rows[("2000", "ivf")][3]) <= 1.0
    # 16 candidates re-scored in float32 find every nearest neighbour of 16-dim random vectors.
    assert float(rows[("300", "exact_2way_bf16")][3]) == float(rows[("2000", "exact_2way_bf16")][3]) == 1.0
    assert all(int(r[2]) > 0 for r in rows.values())
