"""tools/int8_report.py: a row per layer (precision, alpha, isolated and cumulative cosine), the held-out and probe
cosines, the JSON an int8 export keeps; a bad option ends in one error line."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from pretrained_checkpoints import checkpoint
from conftest import needs_int8
from tf_msemb.inference.int8_export import PROBES
from tf_msemb.inference.int8_calibration import UNIT_LABELS

TOOL = os.path.join(REPO, "tools", "int8_report.py")


@needs_int8
def test_prints_a_row_per_layer_and_writes_the_report(tmp_path):
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("".join(f"sentence {i} about a dog in the park\n" for i in range(40)), encoding="utf-8")
    result = subprocess.run([sys.executable, TOOL, f"--model={checkpoint('bert_wordpiece_uncased')}",
                             f"--calibration_file={calibration}", "--int8_smoothing=per_layer", "--int8_ranges=mse",
                             "--int8_fallback_cosine=1.0", "--int8_max_fallback_layers=1",
                             f"--output={tmp_path / 'report.json'}"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    # A budget of cosine 1.0 is never met: exactly the allowed one layer, the worst isolated one, falls back.
    worst = min(report["layers"], key=lambda layer: layer["isolated_cosine"]["mean"])["layer"]
    assert report["fallback_layers"] == [worst] and report["held_out_sentences"] == 5
    assert report["ranges"] == "mse" and report["smoothing"] == "per_layer"
    rows = [line.split() for line in result.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [int(row[0]) for row in rows] == [layer["layer"] for layer in report["layers"]]
    assert rows[worst][1] == report["fallback_dtype"]
    assert all(float(row[2]) == layer["smoothing"] for row, layer in zip(rows, report["layers"]))
    assert [row[3] for row in rows] == [",".join(map(str, layer["outlier_channels"])) or "-"
                                        for layer in report["layers"]]
    assert all(f"probe {name!r}: cosine" in result.stdout for name in PROBES)


@pytest.mark.slow
@needs_int8
@pytest.mark.parametrize("unit", ["block", "matmul"])
def test_block_and_matmul_fallback_print_each_unit_and_the_units_that_fell_back(tmp_path, unit):
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("".join(f"sentence {i} about a dog in the park\n" for i in range(40)), encoding="utf-8")
    result = subprocess.run([sys.executable, TOOL, f"--model={checkpoint('bert_wordpiece_uncased')}",
                             f"--calibration_file={calibration}", f"--int8_fallback_unit={unit}",
                             "--int8_fallback_cosine=1.0", "--int8_max_fallback_layers=1",
                             f"--output={tmp_path / 'report.json'}"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    # Blocks: the lowest isolated cosine falls back first; matmuls: the largest gain in bfloat16.
    scores = {(layer["layer"], part): entry["isolated_cosine"]["mean"] if unit == "block"
              else layer["isolated_cosine"]["mean"] - entry["fallback_cosine"]["mean"]
              for layer in report["layers"] for part, entry in layer[f"{unit}s"].items()}
    worst = min(scores, key=scores.get)
    assert report[f"fallback_{unit}s"] == [list(worst)] and report["fallback_layers"] == [worst[0]]
    name = UNIT_LABELS[worst[1]]
    dtype = report["fallback_dtype"]
    assert f"as exported ({dtype} {unit}s: {worst[0]} {name}; float32 GELU channels " in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.split() and line.split()[0] == str(worst[0]))
    shown = f"{scores[worst]:.6f}" if unit == "block" else f"{-scores[worst]:+.6f}"
    assert f"{dtype} {name}" in row and f"{name} {shown}" in row


def test_a_bad_smoothing_value_ends_in_one_error_line(tmp_path):
    result = subprocess.run([sys.executable, TOOL, f"--model={checkpoint('bert_wordpiece_uncased')}",
                             f"--calibration_file={tmp_path / 'c.txt'}", "--int8_smoothing=lots"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("error:") and "lots" in result.stderr
