import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import cli_env
from conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # a benchmark tool's report, not the package's behaviour: about 40 s

NUMBER = r"([\d.]+)"


def _row(out, name="tf_msemb"):
    row = re.search(rf"^{re.escape(name)}\s+16\s+(\S+)\s+200\s+{NUMBER}\s+{NUMBER}\s+(\d+)\s+{NUMBER}\s+{NUMBER}$", out,
                    flags=re.M)
    assert row, out
    return row.group(1), float(row.group(2)), float(row.group(3)), int(row.group(4)), float(row.group(5))


def test_prints_sentences_per_second_and_peak_rss_and_cuts_to_max_words(quickstart_run, tmp_path):
    work, _ = quickstart_run
    args = [f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={work}/runs/quickstart/model", "--limit=100", "--batch_size=16",
            "--passes=1", "--measure=throughput"]
    # Two default inputs (train and heldout English), 100 lines of each.
    out = run([*args, "--max_words=4"], tmp_path)
    cap, words, rate, rss, cosine = _row(out)
    assert cap == "4" and words <= 4 and rate > 0 and rss > 100 and cosine == pytest.approx(1.0, abs=1e-5)
    if "st:torch" in out:  # the peer (packaged MiniLM, 384 wide) is another model than the 128-wide quickstart
        assert re.search(r"^st:torch\s.*\s-\s+-$", out, flags=re.M), out
    cap, words, _, _, _ = _row(run(args, tmp_path))
    assert cap == "-" and words > 5


def test_latency_and_varied_traffic_rows_for_each_model(quickstart_run, tmp_path):
    """Two models, two rows in each table; traffic's growth is its two RSS figures' ratio."""
    work, _ = quickstart_run
    model = f"{work}/runs/quickstart/model"
    out = run([f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={model}", f"--model={model}/", "--limit=50",
               "--measure=latency,traffic", "--latency_requests=5", "--traffic_requests=15", "--nopeer"], tmp_path)
    latency = re.findall(rf"^tf_msemb:model\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+(\d+)\s+{NUMBER}$", out,
                         flags=re.M)
    assert len(latency) == 2, out
    for b1_p50, b1_p99, b8_p50, b8_p99, _, disk in latency:
        assert 0 < float(b1_p50) <= float(b1_p99) and 0 < float(b8_p50) <= float(b8_p99)
        assert float(disk) > 0.1  # the export directory's files
    traffic = re.findall(rf"^tf_msemb:model\s+15\s+(\d+)\s+(\d+)\s+{NUMBER}x\s+{NUMBER}$", out, flags=re.M)
    assert len(traffic) == 2, out
    for first, end, growth, rate in traffic:
        assert int(first) <= int(end) and float(growth) == pytest.approx(int(end) / int(first), abs=0.01)
        assert float(rate) > 0
    assert "sentences/s" not in out.split("b1 p50")[0]  # no throughput table


def test_a_row_of_each_model_per_intra_op_thread_setting(quickstart_run, tmp_path):
    work, _ = quickstart_run
    out = run([f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={work}/runs/quickstart/model", "--limit=100",
               "--batch_size=16", "--passes=1", "--measure=throughput", "--nopeer", "--intra_op_threads=0",
               "--intra_op_threads=1"], tmp_path)
    assert _row(out, "tf_msemb intra TF")[4] == pytest.approx(1.0, abs=1e-5)
    assert _row(out, "tf_msemb intra 1")[4] == pytest.approx(1.0, abs=1e-5)


def test_a_litert_file_gets_rows_beside_its_export_with_the_export_s_vectors(quickstart_run, tmp_path):
    pytest.importorskip("ai_edge_litert", reason="the litert extra (ai-edge-litert) is not installed")
    work, _ = quickstart_run
    model = f"{work}/runs/quickstart/model"
    litert_file = tmp_path / "embedder.tflite"
    run([f"{REPO}/tools/export_litert.py", f"--model={model}", f"--output={litert_file}"], tmp_path)
    out = run([f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={model}", f"--model={litert_file}",
               "--limit=100", "--batch_size=16", "--passes=1", "--measure=throughput,latency", "--latency_requests=5",
               "--nopeer", "--intra_op_threads=1"], tmp_path)
    # Cosines to the first model (the SavedModel): the file computes the same vectors.
    assert _row(out, "tf_msemb:embedder.tflite intra 1")[4] == pytest.approx(1.0, abs=1e-5)
    latency = re.search(rf"^tf_msemb:embedder.tflite intra 1\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+(\d+)\s+{NUMBER}$",
                        out, flags=re.M)
    assert latency and 0 < float(latency.group(1)) <= float(latency.group(2)), out
    assert float(latency.group(6)) == pytest.approx(litert_file.stat().st_size / 2**20, abs=0.05)


def test_says_when_the_peer_side_is_missing(quickstart_run, tmp_path):
    work, _ = quickstart_run
    out = run([f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={work}/runs/quickstart/model", "--limit=20",
               "--batch_size=16", "--passes=1", "--measure=throughput", f"--peer_python={tmp_path}/no-such-python"],
              tmp_path)
    assert "sentence-transformers side skipped" in out
    assert re.search(r"^tf_msemb\s+16\s", out, flags=re.M) and not re.search(r"^st:", out, flags=re.M)


@pytest.mark.skipif(not os.environ.get("TF_MSEMB_PEER_PYTHON"),
                    reason="set TF_MSEMB_PEER_PYTHON to an interpreter with the `bench` extra")
def test_side_by_side_with_sentence_transformers_on_the_same_model(tmp_path):
    """Their float32 row is the reference; bfloat16 autocast is close to it but not equal (it took effect)."""
    export = tmp_path / "minilm"
    run([f"{REPO}/tools/export_pretrained.py", "--model=all-MiniLM-L6-v2", f"--output={export}"], tmp_path)
    out = run([f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={export}", "--limit=100", "--batch_size=16", "--passes=1",
               "--measure=throughput", f"--peer_python={os.environ['TF_MSEMB_PEER_PYTHON']}",
               "--peer_backend=torch", "--peer_backend=torch-bf16"], tmp_path)
    assert "(cosines to st:torch's vectors)" in out
    assert _row(out, "st:torch")[4] == pytest.approx(1.0, abs=1e-6)
    assert 0.999 <= _row(out)[4] <= 1.0
    assert 0.99 <= _row(out, "st:torch-bf16")[4] < 0.99999


@pytest.mark.skipif(not os.environ.get("TF_MSEMB_PEER_BACKENDS_PYTHON"),
                    reason="set TF_MSEMB_PEER_BACKENDS_PYTHON to the sentence-transformers 5.x + optimum interpreter")
def test_onnx_and_openvino_int8_backends_close_to_their_float32(tmp_path):
    """Each quantized backend runs and stays near float32; the prepared models are reused by a second run."""
    export = tmp_path / "minilm"
    run([f"{REPO}/tools/export_pretrained.py", "--model=all-MiniLM-L6-v2", f"--output={export}"], tmp_path)
    args = [f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={export}", "--limit=100", "--batch_size=16", "--passes=1",
            "--measure=throughput", f"--peer_python={os.environ['TF_MSEMB_PEER_BACKENDS_PYTHON']}",
            f"--peer_work={tmp_path}/peers", "--calibration_sentences=50", "--peer_backend=torch",
            "--peer_backend=onnx-qint8", "--peer_backend=openvino-qint8"]
    out = run(args, tmp_path)
    for backend in ("onnx-qint8", "openvino-qint8"):
        assert 0.9 <= _row(out, f"st:{backend}")[4] < 0.9999, out
    prepared = {path: os.path.getmtime(path) for path in (tmp_path / "peers").glob("*/prepared.json")}
    assert len(prepared) == 3
    run(args, tmp_path)
    assert {path: os.path.getmtime(path) for path in (tmp_path / "peers").glob("*/prepared.json")} == prepared


def test_repeats_give_the_median_process_and_the_range(quickstart_run, tmp_path):
    work, _ = quickstart_run
    out = run([f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={work}/runs/quickstart/model", "--limit=100",
               "--batch_size=16", "--passes=1", "--measure=throughput", "--nopeer", "--repeats=3"], tmp_path)
    row = re.search(rf"^tf_msemb\s+16\s+-\s+200\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}-{NUMBER}\s+(\d+)\s", out, flags=re.M)
    assert row, out
    median, low, high = (float(row.group(i)) for i in (2, 3, 4))
    assert low <= median <= high and low < high  # three processes never time alike to 0.1 sentence/s
    assert "the median of 3 processes per row" in out
    failed = subprocess.run([sys.executable, f"{REPO}/tools/benchmarks/bench_encode.py", f"--model={work}/runs/quickstart/model",
                             "--measure=throughput", "--nopeer", "--repeats=0"], capture_output=True, text=True,
                            cwd=tmp_path, env=cli_env())
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == ["error: --repeats=0 must be at least 1"]


def test_names_the_cpu_and_says_where_bfloat16_is_emulated(tmp_path):
    """Speed figures depend on the oneDNN ISA: the report starts with it, and flags a bfloat16 export on a CPU that
    emulates bfloat16 (measured slower than float32 there, docs/cpus.md)."""
    for name, precision in (("bf16", "mixed_bfloat16"), ("f32", "float32")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "saved_model.pb").write_bytes(b"")
        (tmp_path / name / "tf_msemb_export.json").write_text(f'{{"compute_precision": "{precision}"}}')
    code = ("import sys; sys.path.insert(0, 'tools/benchmarks'); import bench_encode; "
            f"print('\\n'.join(bench_encode.cpu_lines(['{tmp_path / 'bf16'}', '{tmp_path / 'f32'}'])))")
    env = dict(cli_env(), ONEDNN_MAX_CPU_ISA="AVX2", TF_ENABLE_ONEDNN_OPTS="0")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("CPU: oneDNN ISA avx2, capped by ONEDNN_MAX_CPU_ISA=AVX2; TensorFlow's oneDNN "
                               "rewrites off"), lines
    assert lines[1].startswith(f"note: {tmp_path / 'bf16'} computes in bfloat16, which this CPU emulates") and \
        len(lines) == 2, lines


def test_a_model_this_cpu_cannot_run_is_refused_before_it_runs(tmp_path):
    """oneDNN would abort the benchmark on a kernel it lacks: the export's own requirements decide first."""
    from tf_msemb.cpus import INT8_REQUIREMENT
    from tf_msemb.cpus import CpuRequirement

    needs = [INT8_REQUIREMENT.to_json(), CpuRequirement(("avx512_core",), "bfloat16 attention", "use the avx2 "
                                                        "target").to_json()]
    (tmp_path / "int8").mkdir()
    (tmp_path / "int8" / "saved_model.pb").write_bytes(b"")
    (tmp_path / "int8" / "tf_msemb_export.json").write_text(json.dumps({"compute_precision": "int8",
                                                                        "cpu_requirements": needs}))
    code = ("import sys; sys.path.insert(0, 'tools/benchmarks'); import bench_encode\n"
            "from tf_msemb.cpus import MachineError\n"
            f"try:\n    bench_encode.cpu_lines(['{tmp_path / 'int8'}'])\nexcept MachineError as e:\n"
            "    print('refused:', e)")
    env = dict(cli_env(), ONEDNN_MAX_CPU_ISA="AVX2")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"refused: {tmp_path / 'int8'} (int8) needs oneDNN ISA avx512_core for bfloat16 attention" in result.stdout
            and "use the avx2 target" in result.stdout), result.stdout
