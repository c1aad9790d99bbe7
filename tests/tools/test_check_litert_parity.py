"""tools/check_litert_parity.py: the cosine of each LiteRT file to its export, per sentence set."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.encoder import SentenceEncoder

pytest.importorskip("ai_edge_litert", reason="the litert extra (ai-edge-litert) is not installed")
TOOL = os.path.join(REPO, "tools", "check_litert_parity.py")


def _file(tokenizer, seed, path):
    from tf_msemb.export import litert

    tf.keras.utils.set_random_seed(seed)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length)
    path.write_bytes(litert.convert(tokenizer, encoder))
    return encoder


def test_its_own_file_is_equal_and_another_model_s_is_not(tokenizer, tmp_path):
    export = export_saved_model(tokenizer, _file(tokenizer, 3, tmp_path / "own.tflite"), str(tmp_path / "export"))
    _file(tokenizer, 4, tmp_path / "other.tflite")  # same tokenizer and shapes, other weights
    (tmp_path / "lines.de.txt").write_text("Ein Hund läuft.\nZwei Katzen.\nＦＵＬＬ\nnot read\n", encoding="utf-8")
    (tmp_path / "reference.json").write_text(json.dumps({"sentences": ["a\nnewline inside", ""]}), encoding="utf-8")
    result = subprocess.run([sys.executable, TOOL, f"--export={export}", f"--tflite={tmp_path / 'own.tflite'}",
                             f"--tflite={tmp_path / 'other.tflite'}", f"--sentences={tmp_path / 'lines.de.txt'}",
                             f"--sentences={tmp_path / 'reference.json'}", "--per_file=3", "--threads=1"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert list(rows) == ["own.tflite", "other.tflite"]
    assert list(rows["own.tflite"]) == ["probe", "lines.de.txt", "reference.json"]
    assert rows["own.tflite"]["lines.de.txt"]["sentences"] == 3 and rows["own.tflite"]["reference.json"]["sentences"] == 2
    for name in ("probe", "lines.de.txt", "reference.json"):
        assert rows["own.tflite"][name]["cosine_min"] >= 0.9999
        assert rows["other.tflite"][name]["cosine_min"] < 0.9
    assert "own.tflite lines.de.txt (3 sentences): cosine min" in result.stdout
