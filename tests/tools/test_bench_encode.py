import re

from conftest import REPO
from conftest import run


def test_prints_sentences_per_second_and_peak_rss(quickstart_run, tmp_path):
    work, _ = quickstart_run
    out = run([f"{REPO}/tools/bench_encode.py", f"--model={work}/runs/quickstart/model", "--limit=100",
               "--batch_size=16", "--max_words=6", "--passes=1"], tmp_path)
    # Two default inputs (train and heldout English), 100 lines of each.
    row = re.search(r"^tf_msemb\s+16\s+6\s+200\s+([\d.]+)\s+(\d+)$", out, flags=re.M)
    assert row, out
    assert float(row.group(1)) > 0 and int(row.group(2)) > 100


def test_sentences_are_cut_to_max_words(tmp_path):
    import sys

    sys.path.insert(0, f"{REPO}/tools")
    from bench_encode import benchmark_sentences

    path = tmp_path / "s.txt"
    path.write_text("one two three four\nfive six\nseven\n")
    assert benchmark_sentences([str(path)], limit=2, max_words=3) == ["one two three", "five six"]
