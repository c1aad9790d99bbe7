"""Exports that say what they need of the CPU: the metadata names it, and every loader stops with one line on a CPU
without it (oneDNN's ISA capped to AVX2 here) instead of aborting in oneDNN."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import corpus_file
from conftest import needs_int8
from tf_msemb.cpus import INT8_REQUIREMENT
from tf_msemb.cpus import CpuRequirement
from tf_msemb.cpus import machine_kernels
from tf_msemb.cpus import read_cpuinfo
from tf_msemb.export.saved_model import METADATA_FILE
from tf_msemb.export.cpu_check import bfloat16_requirements
from tf_msemb.export.saved_model import EmbeddingModule
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.serving import SIGNATURE
from tf_msemb.cpus import this_cpu
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.inference.int8_calibration import Int8Options
from tf_msemb.inference.packed import int8_support

# A consumer's process: TensorFlow and tensorflow-text only. Exit 3 with the error's message, or print the vectors.
CONSUMER = """
import json, sys
import tensorflow as tf, tensorflow_text
kind, path = sys.argv[1:3]
texts = ["a dog runs in the park", "zwei Frauen lesen"]
try:
    if kind == "saved_model":
        vectors = tf.saved_model.load(path)(tf.constant(texts)).numpy()
    elif kind == "session":  # TF Serving's loader: restore, then the init op, before any warm-up request
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
            signature = meta.signature_def["serving_default"]
            vectors = session.run(signature.outputs["outputs"].name, {signature.inputs["inputs"].name: texts})
    else:
        import keras
        vectors = keras.layers.TFSMLayer(path, call_endpoint="serving_default")(tf.constant(texts))["outputs"].numpy()
except tf.errors.OpError as error:
    print(error.message)
    sys.exit(3)
print(json.dumps(vectors.tolist()))
"""
CONSUMERS = ("saved_model", "session", "tfsm")
AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def _consume(kind, path, **environment):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **environment)
    result = subprocess.run([sys.executable, "-c", CONSUMER, kind, path], capture_output=True, text=True, env=env)
    # A negative status is a signal: oneDNN's abort (SIGABRT) is what the check exists to prevent.
    assert result.returncode in (0, 3), (result.returncode, result.stderr[-3000:])
    if result.returncode == 3:
        return None, result.stdout
    return np.array(json.loads(result.stdout.strip().splitlines()[-1])), result.stdout


@pytest.fixture(scope="module")
def encoder(tokenizer):
    tf.keras.utils.set_random_seed(5)
    return SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32,
                           max_sequence_length=tokenizer.max_length, dropout=0.0)


@pytest.fixture(scope="module")
def needs_avx512(tokenizer, encoder, tmp_path_factory):
    """A float32 export whose check asks for AVX-512 (as a bfloat16-writing int8 export does): under the AVX2 cap
    no CPU has it, whatever the machine."""
    module = EmbeddingModule(tokenizer, encoder, cpu_requirements=[
        CpuRequirement(("avx512_core",), "a test kernel", "serve the other export")])
    path = str(tmp_path_factory.mktemp("check") / "needs_avx512")
    tf.saved_model.save(module, path, signatures={SIGNATURE: module.serve})
    return path


@pytest.mark.parametrize("kind", [pytest.param(kind, marks=[pytest.mark.slow] if kind != "saved_model" else [])
                                  for kind in CONSUMERS])
def test_every_loader_stops_with_the_missing_feature_on_a_cpu_without_it(needs_avx512, kind):
    vectors, message = _consume(kind, needs_avx512, **AVX2)
    assert vectors is None
    assert ("this float32 export needs oneDNN ISA avx512_core for a test kernel, which this CPU lacks or "
            "ONEDNN_MAX_CPU_ISA excludes") in message and "serve the other export" in message
    # It names what is missing: the flags where the CPU has no AVX-512, else the cap.
    assert "oneDNN ISA cap: avx2" in message
    if not this_cpu({}).runs("avx512_core"):
        assert "avx512f" in message.split("missing CPU flags: ")[1]
    else:
        loaded, _ = _consume(kind, needs_avx512)
        assert loaded is not None and loaded.shape == (2, 16)


def test_the_evaluation_cli_prints_one_error_line(needs_avx512, tmp_path):
    env = dict(os.environ, **AVX2)
    result = subprocess.run([sys.executable, "-m", "tf_msemb.evaluate", f"--model={needs_avx512}", "--task=retrieval",
                             f"--pair={corpus_file('heldout', 'en')},{corpus_file('heldout', 'de')}",
                             f"--output={tmp_path / 'r.json'}"], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: this float32 export needs oneDNN ISA avx512_core")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_bfloat16_export_stops_only_where_onednn_would_get_its_matmuls(tokenizer, encoder, tmp_path):
    path = export_saved_model(tokenizer, encoder, str(tmp_path / "bf16"), precision="mixed_bfloat16")
    needs = json.load(open(os.path.join(path, METADATA_FILE), encoding="utf-8"))["cpu_requirements"]
    assert [(need["any_of_isa"], need["only_with_onednn_rewrites"]) for need in needs] == [
        (["avx512_core", "avx2_vnni_2"], True)]
    # With TensorFlow's oneDNN rewrites on, an AVX-512 CPU hands oneDNN the bfloat16 matmuls and it has no kernel
    # under the cap: without the check this process aborts. An AVX2-only CPU keeps them on Eigen, and runs.
    vectors, message = _consume("saved_model", path, TF_ENABLE_ONEDNN_OPTS="1", **AVX2)
    onednn_gets_them = "avx512f" in (machine_kernels(read_cpuinfo(), {}, False).flags or ())
    if onednn_gets_them:
        assert vectors is None and "this mixed_bfloat16 export needs" in message
        assert "TF_ENABLE_ONEDNN_OPTS=0" in message
    else:
        assert vectors is not None
    vectors, _ = _consume("saved_model", path, TF_ENABLE_ONEDNN_OPTS="0", **AVX2)
    assert vectors is not None and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    float32 = export_saved_model(tokenizer, encoder, str(tmp_path / "f32"))
    assert json.load(open(os.path.join(float32, METADATA_FILE), encoding="utf-8"))["cpu_requirements"] == []


@pytest.mark.slow
@needs_int8
@pytest.mark.parametrize("target", ["native", "avx2"])
def test_an_int8_export_names_its_needs_and_the_avx2_target_runs_under_the_cap(tokenizer, encoder, tmp_path, target):
    options = Int8Options(target=target)
    path = export_saved_model(tokenizer, encoder, str(tmp_path / target), precision="int8",
                              calibration_file=corpus_file("train", "en"), int8=options)
    metadata = json.load(open(os.path.join(path, METADATA_FILE), encoding="utf-8"))
    resolved = options.for_cpu(int8_support().kernels)
    assert [tuple(need["any_of_isa"]) for need in metadata["cpu_requirements"]] == [
        isas for isas, _ in resolved.cpu_requirements()]
    calibration = metadata["int8_calibration"]
    assert (calibration["weight_scale"], calibration["attention"], calibration["fallback_dtype"]) == (
        resolved.weight_scale, resolved.attention, resolved.fallback_dtype)
    here, _ = _consume("saved_model", path)
    capped, message = _consume("session", path, **AVX2)
    if len(resolved.cpu_requirements()) == 1:  # AVX2 only: runs under the cap, as on any x86-64 CPU with AVX2
        assert capped is not None and (capped * here).sum(axis=1).min() > 0.999
    else:
        assert capped is None and "this int8 export needs oneDNN ISA avx512_core" in message
        assert "--int8_target=avx2" in message


# A machine seen through another /proc: a private mount namespace where /proc is a tmpfs holding links to every
# entry of the real one but cpuinfo (TensorFlow itself needs /proc/self), and `cpuinfo` written there when given.
HIDDEN_PROC = """
set -e
mount --make-rprivate /
mkdir -p "$1/real" && mount --bind /proc "$1/real" && mount -t tmpfs tmpfs /proc
for entry in "$1"/real/*; do [ "$(basename "$entry")" = cpuinfo ] || ln -s "$entry" "/proc/$(basename "$entry")"; done
if [ -f "$1/cpuinfo" ]; then cp "$1/cpuinfo" /proc/cpuinfo; fi
shift
exec "$@"
"""


def _consume_elsewhere(kind, path, tmp_path, cpuinfo=None):
    """`_consume` on a machine whose /proc/cpuinfo is `cpuinfo` (None: absent, as on macOS or Windows)."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no private mount namespaces here (unshare -m needs root)")
    if cpuinfo is not None:
        (tmp_path / "cpuinfo").write_text(cpuinfo, encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(["unshare", "-m", "sh", "-c", HIDDEN_PROC, "sh", str(tmp_path), sys.executable, "-c",
                             CONSUMER, kind, path], capture_output=True, text=True, env=env)
    assert result.returncode in (0, 3), (result.returncode, result.stderr[-3000:])
    if result.returncode == 3:
        return None, result.stdout
    return np.array(json.loads(result.stdout.strip().splitlines()[-1])), result.stdout


@pytest.fixture(scope="module")
def int8_kind(tokenizer, encoder, tmp_path_factory):
    """A float32 export whose check asks what an int8 export's does (oneDNN's x86 int8 kernels), and one asking a
    bfloat16 export's: the check alone decides, whatever the kernels."""
    paths = {}
    for name, requirements in (("int8", [INT8_REQUIREMENT]), ("bfloat16", bfloat16_requirements())):
        module = EmbeddingModule(tokenizer, encoder, cpu_requirements=requirements)
        paths[name] = str(tmp_path_factory.mktemp("check") / name)
        tf.saved_model.save(module, paths[name], signatures={SIGNATURE: module.serve})
    return paths


def test_without_proc_cpuinfo_the_check_gives_the_platform_s_answer_not_a_read_error(int8_kind, tmp_path):
    """macOS and Windows have no /proc/cpuinfo: the old check's read failed the load with NotFoundError."""
    vectors, message = _consume_elsewhere("saved_model", int8_kind["int8"], tmp_path)
    assert vectors is None and "No such file" not in message
    assert ("this float32 export needs int8 matmuls (u8 x s8 kernels of oneDNN), x86-64 kernels of oneDNN, which run "
            "on Linux x86-64 only, not on a system without /proc/cpuinfo") in message
    vectors, _ = _consume_elsewhere("saved_model", int8_kind["bfloat16"], tmp_path)
    assert vectors is not None and vectors.shape == (2, 16)  # bfloat16 runs on Eigen there


def test_on_a_graviton_s_cpuinfo_an_int8_check_names_linux_aarch64(int8_kind, tmp_path):
    graviton = open(os.path.join(REPO, "tests", "fixtures", "cpuinfo", "graviton3_neoverse_v1.txt"),
                    encoding="utf-8").read()
    vectors, message = _consume_elsewhere("session", int8_kind["int8"], tmp_path, cpuinfo=graviton)
    assert vectors is None and "not on Linux aarch64: serve the float32 export" in message
    vectors, _ = _consume_elsewhere("session", int8_kind["bfloat16"], tmp_path, cpuinfo=graviton)
    assert vectors is not None


def test_an_export_whose_ops_this_tensorflow_lacks_stops_in_one_line_before_loading(tmp_path, monkeypatch):
    """macOS' TensorFlow registers no oneDNN op: an int8 export would stop deep in the load on "Op type not
    registered"; the package's loaders name the platform and the export to use first."""
    from tf_msemb.cpus import MachineError
    from tf_msemb.evaluation.encoding import load_model
    from tf_msemb.export import saved_model

    (tmp_path / "saved_model.pb").write_bytes(b"")
    (tmp_path / METADATA_FILE).write_text(json.dumps({"required_ops": ["_MklLayerNorm", "_QuantizedMatMul"]}))
    registered = saved_model.op_def_registry.get
    monkeypatch.setattr(saved_model.op_def_registry, "get",
                        lambda op: None if op == "_QuantizedMatMul" else registered(op))
    with pytest.raises(MachineError, match=r"needs TensorFlow ops _QuantizedMatMul \(oneDNN.*int8 exports run on "
                                           r"Linux x86-64; serve the float32 export"):
        load_model(str(tmp_path))


def test_building_a_bfloat16_export_is_refused_where_onednn_has_no_kernel(tokenizer, capped_sapphire_rapids):
    from tf_msemb.cpus import MachineError
    from tf_msemb.export.saved_model import inference_module

    encoder = SentenceEncoder(tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length, hidden_dim=16,
                              num_layers=1, num_heads=2, intermediate_dim=32)
    with pytest.raises(MachineError, match="building a mixed_bfloat16 export here needs oneDNN ISA avx512_core .* "
                                           "oneDNN ISA cap: avx2\\): set TF_ENABLE_ONEDNN_OPTS=0"):
        inference_module(tokenizer, encoder, precision="mixed_bfloat16")
