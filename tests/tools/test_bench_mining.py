import re

import pytest

from conftest import REPO
from conftest import run

pytestmark = pytest.mark.slow  # a benchmark tool's report, not the package's behaviour: about 20 s


def test_rows_for_exact_sampled_and_approximate_search(tmp_path):
    out = run([f"{REPO}/tools/bench_mining.py", "--size=300", "--size=2000", "--index=exact", "--index=exact_2way",
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
