import os
import sys

import pytest

from conftest import REPO
from conftest import run


@pytest.mark.heavy
@pytest.mark.slow  # a benchmark tool's report: about 40 s a search
@pytest.mark.parametrize("search", [["--codes=exact"], ["--codes=binary", "--cells=16", "--probes=4"]])
def test_a_row_per_run_with_the_same_pairs_as_one_machine(tmp_path, search):
    tool = os.path.join(REPO, "tools", "benchmarks", "bench_beam_mining.py")
    args = [sys.executable, tool, "--size=3000", "--dim=16", "--num_shards=3", f"--work_dir={tmp_path}", *search]
    out = run([*args[1:], "--workers=2"], tmp_path)
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| 3,000 |")]
    assert [row[1] for row in rows] == ["one machine", "beam, 2 workers"]
    pairs, shared, only = (int(rows[1][i].replace(",", "")) for i in (6, 7, 8))
    assert pairs == shared > 2000 and only == 0 and float(rows[1][9]) <= 1e-5 and float(rows[1][10].strip(" |")) > 0.99
    # A later run compares with the one-machine pairs written before, without mining them again.
    out = run([*args[1:], "--workers=1", "--noone_machine"], tmp_path)
    assert [line.split(" | ")[1] for line in out.splitlines() if line.startswith("| 3,000 |")] == ["beam, 1 worker"]
