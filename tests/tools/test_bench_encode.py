import os
import re

import pytest

from conftest import REPO
from conftest import run

pytestmark = pytest.mark.slow  # a benchmark tool's report, not the package's behaviour: about 35 s


def _row(out):
    row = re.search(r"^tf_msemb\s+16\s+(\S+)\s+200\s+([\d.]+)\s+([\d.]+)\s+(\d+)$", out, flags=re.M)
    assert row, out
    return row.group(1), float(row.group(2)), float(row.group(3)), int(row.group(4))


def test_prints_sentences_per_second_and_peak_rss_and_cuts_to_max_words(quickstart_run, tmp_path):
    work, _ = quickstart_run
    args = [f"{REPO}/tools/bench_encode.py", f"--model={work}/runs/quickstart/model", "--limit=100", "--batch_size=16",
            "--passes=1"]
    # Two default inputs (train and heldout English), 100 lines of each.
    cap, words, rate, rss = _row(run([*args, "--max_words=4"], tmp_path))
    assert cap == "4" and words <= 4 and rate > 0 and rss > 100
    cap, words, _, _ = _row(run(args, tmp_path))
    assert cap == "-" and words > 5


def test_says_when_the_peer_side_is_missing(quickstart_run, tmp_path):
    work, _ = quickstart_run
    out = run([f"{REPO}/tools/bench_encode.py", f"--model={work}/runs/quickstart/model", "--limit=20",
               "--batch_size=16", "--passes=1", f"--peer_python={tmp_path}/no-such-python"], tmp_path)
    assert "sentence-transformers side skipped" in out
    assert re.search(r"^tf_msemb\s+16\s", out, flags=re.M) and not re.search(r"^sentence-transformers\s", out,
                                                                              flags=re.M)


@pytest.mark.skipif(not os.environ.get("TF_MSEMB_PEER_PYTHON"),
                    reason="set TF_MSEMB_PEER_PYTHON to an interpreter with the `bench` extra")
@pytest.mark.parametrize("precision,row,highest", [("float32", "sentence-transformers", 1.0),
                                                   ("bfloat16", "sentence-transformers-bf16", 0.99999)])
def test_side_by_side_with_sentence_transformers_on_the_same_model(tmp_path, precision, row, highest):
    """Their row and the cosine of both sides' vectors; in bfloat16 autocast close but not equal (it took effect)."""
    export = tmp_path / "minilm"
    run([f"{REPO}/tools/export_pretrained.py", "--model=all-MiniLM-L6-v2", f"--output={export}"], tmp_path)
    out = run([f"{REPO}/tools/bench_encode.py", f"--model={export}", "--limit=100", "--batch_size=16", "--passes=1",
               f"--peer_python={os.environ['TF_MSEMB_PEER_PYTHON']}", f"--peer_precision={precision}"], tmp_path)
    assert re.search(rf"^{row}\s+16\s+-\s+200\s+[\d.]+\s+[\d.]+\s+\d+$", out, flags=re.M), out
    low = float(re.search(r"cosine of the two models' vectors: min ([\d.]+)", out).group(1))
    assert 0.999 <= low <= highest
