import re

from conftest import REPO
from conftest import run


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
