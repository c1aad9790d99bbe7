import re

from conftest import REPO
from conftest import run


def test_both_targets_agree_and_each_row_has_its_numbers(tmp_path):
    out = run([f"{REPO}/tools/benchmarks/bench_ems_target.py", "--batch=6", "--length=9", "--vocabulary=300", "--repeats=1"],
              tmp_path)
    rows = dict((m[0], m[1:]) for m in re.findall(r"^(\w+)\s+(\S+)\s+(\d+)\s+(-?\d+)\s+(\S+)$", out, flags=re.M))
    assert set(rows) == {"inputs", "one_hot", "segment_sum"}, out
    assert rows["inputs"][0] == "-" and rows["inputs"][2] == "0"
    assert float(rows["one_hot"][0]) > 0 and float(rows["segment_sum"][0]) > 0
    assert rows["one_hot"][3] == rows["segment_sum"][3] != "-"
