"""Shared fixtures. Two logical CPU devices are configured before TensorFlow
starts, so strategy tests can run several replicas on this machine."""

import os
import subprocess
import sys

import gin
import pytest
import tensorflow as tf

from tf_msemb.cpus import this_cpu
from tensorflow.python.framework import op_def_registry

from tf_msemb.inference.packed import INT8_REQUIRED_OPS
from tf_msemb.inference.packed import int8_support
from tf_msemb.quickstart import CORPUS_DIR as CORPUS
from tf_msemb.quickstart import LANGUAGES as LANGS
from tf_msemb.runtime import split_cpu

split_cpu(2)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests that run int8 or bfloat16 graphs carry these marks: `make test` runs them a second time with oneDNN capped to
# AVX2 (`-m "int8 or bfloat16"`), and they skip, naming the missing feature, only where this CPU lacks it.
INT8_UNSUPPORTED = int8_support().unsupported
BFLOAT16_UNSUPPORTED = this_cpu().bfloat16_matmul_unsupported()
# int8 matmuls writing bfloat16 need oneDNN's bfloat16 kernels whether TensorFlow's oneDNN rewrites are on or not.
INT8_BFLOAT16_UNSUPPORTED = INT8_UNSUPPORTED or (
    None if this_cpu().bfloat16 else f"{this_cpu().where()} has no bfloat16 kernels (AVX-512)")
INT8_MARKS = [pytest.mark.int8, pytest.mark.skipif(INT8_UNSUPPORTED is not None, reason=str(INT8_UNSUPPORTED))]
BFLOAT16_MARKS = [pytest.mark.bfloat16,
                  pytest.mark.skipif(BFLOAT16_UNSUPPORTED is not None, reason=f"bfloat16: {BFLOAT16_UNSUPPORTED}")]


def _marked(marks):
    def mark(test):
        for one in marks:
            test = one(test)
        return test
    return mark


# The oneDNN ops tf_msemb calls without a wrapper are registered by x86-64 (and aarch64) TensorFlow only: tests of
# them skip where the registry lacks them, decided before they run, so an error of the op itself fails the test.
ONEDNN_OPS_MISSING = [op for op in INT8_REQUIRED_OPS if op_def_registry.get(op) is None]
needs_onednn_ops = pytest.mark.skipif(bool(ONEDNN_OPS_MISSING), reason=f"this TensorFlow {tf.__version__} registers "
                                      f"no {', '.join(ONEDNN_OPS_MISSING)}")
needs_int8 = _marked(INT8_MARKS)
needs_bfloat16 = _marked(BFLOAT16_MARKS)
needs_int8_bfloat16 = _marked([pytest.mark.int8, pytest.mark.skipif(INT8_BFLOAT16_UNSUPPORTED is not None,
                                                                     reason=str(INT8_BFLOAT16_UNSUPPORTED))])
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def corpus_file(split, lang):
    return os.path.join(CORPUS, f"{split}.{lang}.txt")


@pytest.fixture
def clean_gin():
    """An empty gin configuration before and after the test."""
    gin.clear_config()
    yield
    gin.clear_config()


def cli_env():
    """This process's environment without TF_CPP_MIN_LOG_LEVEL: a command line's own quieting is what is tested."""
    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def run(args, cwd):
    """Runs `python args...` in `cwd`; fails the test with its stderr unless it exits 0."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory):
    """The quickstart recipe run once through its command lines, as `make quickstart` does.

    Returns `(work_dir, {step: stdout})`; the model is `work_dir/runs/quickstart/model`.
    """
    work = tmp_path_factory.mktemp("quickstart")
    tools = os.path.join(REPO, "tools")
    outputs = {
        "spm": run([f"{tools}/train_spm.py", *[f"--input={corpus_file('train', l)}" for l in LANGS],
                    "--languages=en,de,fr,es", "--vocab_size=1000", "--model_prefix=runs/quickstart/spm/quickstart"],
                   work),
        "records": run([f"{tools}/make_tfrecords.py", *[f"--input={l}:{corpus_file('train', l)}" for l in LANGS],
                        "--pivot=en", "--output_dir=runs/quickstart/data", "--prefix=quickstart"], work),
        "train": run(["-m", "tf_msemb.train", f"--gin_file={REPO}/configs/quickstart.gin",
                      "--model_dir=runs/quickstart/model"], work),
    }
    return work, outputs


@pytest.fixture(scope="session")
def spm_model(tmp_path_factory):
    """A SentencePiece model trained on the quickstart corpus (with <2xx> tokens)."""
    from tf_msemb.text.spm_training import train_sentencepiece

    prefix = tmp_path_factory.mktemp("spm") / "qs"
    return train_sentencepiece([corpus_file("train", l) for l in LANGS], str(prefix), 1000, languages=LANGS)


@pytest.fixture(scope="session")
def tokenizer(spm_model):
    from tf_msemb.text.tokenizers import SentencePieceTokenizer

    return SentencePieceTokenizer(spm_model, max_length=48)


@pytest.fixture(scope="session")
def quickstart_records(tmp_path_factory):
    """TFRecords of the quickstart corpus; returns the manifest path."""
    from tf_msemb.data.readers import aligned_pairs
    from tf_msemb.data.writing import write_tfrecords

    out = tmp_path_factory.mktemp("records")
    files = {l: corpus_file("train", l) for l in LANGS}
    write_tfrecords(aligned_pairs(files, "en"), str(out), "qs", num_shards=2, verbose=False)
    return str(out / "qs.manifest.json")


@pytest.fixture(scope="session")
def two_device_strategy():
    """One strategy per process: separate MirroredStrategy objects reuse
    collective instance keys and abort each other's all-gathers."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="session")
def export(tokenizer, tmp_path_factory):
    """A tiny random encoder's float32 export (the default packed path), 16 dims."""
    from tf_msemb.export.saved_model import export_saved_model
    from tf_msemb.models.encoder import SentenceEncoder

    tf.keras.utils.set_random_seed(3)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length)
    return export_saved_model(tokenizer, encoder, str(tmp_path_factory.mktemp("export") / "model"))


@pytest.fixture
def capped_sapphire_rapids(monkeypatch):
    """This process as seen on a Sapphire Rapids with oneDNN capped to AVX2 and TensorFlow's rewrites on: oneDNN
    gets bfloat16 matmuls and has no kernel for them (it would abort the process)."""
    from tf_msemb import cpus

    text = open(os.path.join(os.path.dirname(__file__), "fixtures", "cpuinfo",
                             "sapphire_rapids_xeon_8462y.txt"), encoding="utf-8").read()
    monkeypatch.setattr(cpus, "read_cpuinfo", lambda path=cpus.CPUINFO: text)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
