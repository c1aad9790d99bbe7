import re

import pytest

from conftest import REPO
from conftest import run

pytestmark = pytest.mark.slow  # a profiling tool's report: about 30 s


def _rows(out, title):
    table = out.split(f"| {title} |")[1].split("\n\n")[0]
    return {m[0]: (float(m[1]), float(m[2])) for m in re.findall(r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \|", table,
                                                                  flags=re.M)}


def test_stages_and_op_types_of_one_request_add_up(export, tmp_path):
    out = run([f"{REPO}/tools/benchmarks/profile_request.py", f"--model={export}", "--requests=5", "--top=100"], tmp_path)
    summary = re.search(r"untraced p50 ([\d.]+) ms; traced: span ([\d.]+) ms, op time ([\d.]+) ms, (\d+) ops", out)
    assert summary, out
    p50, span, op_time, ops = (float(g) for g in summary.groups())
    assert p50 > 0 and span > 0 and op_time > 0 and ops > 50
    stages, types = _rows(out, "stage"), _rows(out, "op type")
    # The tokenizer's ops, the encoder's matmuls and the control flow (tf.cond, the packed path's calls) all ran.
    assert stages["text"][0] > 0 and stages["matmul"][0] > 0 and stages["control"][0] > 0
    assert any("Sentencepiece" in name or "SentencePiece" in name for name in types), types
    # Medians per request: per stage and per op type, the counts cover (about) every op executed.
    assert sum(count for count, _ in stages.values()) == pytest.approx(ops, rel=0.05)
    assert sum(count for count, _ in types.values()) == pytest.approx(ops, rel=0.05)
