"""tools/mine_bitext.py on the quickstart model: held-out English against shuffled German plus distractors."""

import os
import random

import pytest

from conftest import CORPUS
from conftest import REPO
from conftest import run
from conftest import needs_bfloat16


def _read(name):
    with open(os.path.join(CORPUS, name), encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.mark.slow
@needs_bfloat16
def test_mines_true_translations_above_the_threshold_and_reuses_its_cache(quickstart_run, tmp_path):
    work, _ = quickstart_run
    english, german = _read("heldout.en.txt"), _read("heldout.de.txt")
    gold = dict(zip(english, german))
    shuffled = german + _read("train.de.txt")[:200]
    random.Random(0).shuffle(shuffled)
    (tmp_path / "src.en").write_text("\n".join(english) + "\n")
    (tmp_path / "tgt.de").write_text("\n".join(shuffled) + "\n")
    tool = os.path.join(REPO, "tools", "mine_bitext.py")
    args = [tool, f"--model={work}/runs/quickstart/model", f"--src={tmp_path}/src.en", f"--tgt={tmp_path}/tgt.de",
            f"--cache_dir={tmp_path}/cache", "--chunk_size=64"]
    out = run([*args, f"--output={tmp_path}/all.tsv"], tmp_path)
    assert "src: 110 distinct sentences" in out
    rows = [line.split("\t") for line in (tmp_path / "all.tsv").read_text().splitlines()]
    scores = [float(r[0]) for r in rows]
    assert scores == sorted(scores, reverse=True)
    correct = [gold.get(r[1]) == r[2] for r in rows]
    # The best-scoring half of the mined pairs is nearly all true translations.
    assert sum(correct[: len(rows) // 2]) >= 0.95 * (len(rows) // 2)
    # bfloat16 scores with a float32 re-score mine the same pairs with the same (float32) scores.
    run([*args, f"--output={tmp_path}/bf16.tsv", "--matmul_dtype=bfloat16"], tmp_path)
    bfloat16 = [line.split("\t") for line in (tmp_path / "bf16.tsv").read_text().splitlines()]
    expected = {(r[1], r[2]): score for r, score in zip(rows, scores)}
    assert {(r[1], r[2]): float(r[0]) for r in bfloat16} == pytest.approx(expected, abs=2e-6)
    cache = tmp_path / "cache" / "tgt.de.float16.npy"
    written = cache.stat().st_mtime_ns
    threshold = scores[len(rows) // 2]
    out = run([*args, f"--output={tmp_path}/top.tsv", f"--threshold={threshold}", "--index=ivf"], tmp_path)
    assert cache.stat().st_mtime_ns == written  # embeddings came from the cache
    top = [line.split("\t") for line in (tmp_path / "top.tsv").read_text().splitlines()]
    assert top and all(float(r[0]) >= threshold for r in top)
    assert sum(gold.get(r[1]) == r[2] for r in top) >= 0.95 * len(top)
    # At scale (IVF over int8 codes; 16 cells for 310 targets, all probed, candidates re-scored): exact mining's pairs.
    out = run([*args, f"--output={tmp_path}/scale.tsv", "--codes=int8"], tmp_path)
    assert "y index: IVF16,SQ8, 16 probed, 16 re-scored" in out
    scale = [line.split("\t") for line in (tmp_path / "scale.tsv").read_text().splitlines()]
    assert {(r[1], r[2]): float(r[0]) for r in scale} == pytest.approx(expected, abs=2e-6)
    assert any(name.startswith("mine-int8-") for name in os.listdir(tmp_path / "cache"))
