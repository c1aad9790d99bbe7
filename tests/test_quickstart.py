"""The quickstart recipe end to end, as `make quickstart` runs it (in a temp dir)."""

import json
import os
import subprocess
import sys

from conftest import CORPUS
from conftest import LANGS
from conftest import REPO


def run(args, cwd):
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_quickstart_trains_exports_and_retrieves_held_out_translations(tmp_path):
    tools = os.path.join(REPO, "tools")
    run([f"{tools}/train_spm.py", *[f"--input={CORPUS}/train.{l}.txt" for l in LANGS], "--languages=en,de,fr,es",
         "--vocab_size=1000", "--model_prefix=runs/quickstart/spm/quickstart"], tmp_path)
    out = run([f"{tools}/make_tfrecords.py", *[f"--input={l}:{CORPUS}/train.{l}.txt" for l in LANGS], "--pivot=en",
               "--output_dir=runs/quickstart/data", "--prefix=quickstart"], tmp_path)
    assert "en-de: wrote 390 pairs" in out
    out = run(["-m", "tf_msemb.train", f"--gin_file={REPO}/configs/quickstart.gin", "--model_dir=runs/quickstart/model"],
              tmp_path)
    assert "step 400/400" in out and "Exported SavedModel: runs/quickstart/model/export/final" in out
    pairs = [f"--pair={CORPUS}/heldout.en.txt,{CORPUS}/heldout.{l}.txt" for l in ("de", "fr", "es")]
    out = run(["-m", "tf_msemb.evaluate", "--model=runs/quickstart/model", "--task=retrieval",
               "--output=result.json", *pairs], tmp_path)
    assert "heldout.en.txt / heldout.de.txt" in out
    results = json.loads((tmp_path / "result.json").read_text())
    assert len(results) == 3
    for name, r in results.items():
        assert r["size"] == 110
        # Chance is 1/110; a working model finds most translations.
        assert r["mean"] > 0.6, (name, r)
