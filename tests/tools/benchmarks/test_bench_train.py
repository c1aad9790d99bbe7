import re
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import cli_env
from conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # a benchmark tool's report, not the package's behaviour: about 25 s


def test_prints_throughput_and_peak_rss(tmp_path, spm_model, quickstart_records):
    out = run([f"{REPO}/tools/benchmarks/bench_train.py", f"--gin_file={REPO}/configs/quickstart.gin", "--batch_size=8", "--steps=5",
               f"--gin_param=SentencePieceTokenizer.model_file = '{spm_model}'",
               f"--gin_param=make_dataset.corpora = ['{quickstart_records}']",
               "--gin_param=SentenceEncoder.num_layers = 1"], tmp_path)
    row = re.search(r"^precomputed\s+8\s+([\d.]+)\s+(\d+)$", out, flags=re.M)
    assert "sentence-transformers side skipped" in out  # the quickstart recipe has no precomputed teacher
    assert row, out
    assert float(row.group(1)) > 0 and int(row.group(2)) > 100


def test_a_row_of_each_variant_per_intra_op_thread_setting(tmp_path, spm_model, quickstart_records):
    out = run([f"{REPO}/tools/benchmarks/bench_train.py", f"--gin_file={REPO}/configs/quickstart.gin", "--batch_size=8", "--steps=5",
               f"--gin_param=SentencePieceTokenizer.model_file = '{spm_model}'",
               f"--gin_param=make_dataset.corpora = ['{quickstart_records}']",
               "--gin_param=SentenceEncoder.num_layers = 1", "--intra_op_threads=0", "--intra_op_threads=1"], tmp_path)
    for name in ("precomputed intra TF", "precomputed intra 1"):
        assert re.search(rf"^{name}\s+8\s+[\d.]+\s+\d+$", out, flags=re.M), out


def test_a_row_per_gradient_cache_setting(tmp_path, spm_model, quickstart_records):
    out = run([f"{REPO}/tools/benchmarks/bench_train.py", f"--gin_file={REPO}/configs/quickstart.gin", "--batch_size=8", "--steps=2",
               "--warmup=1", f"--gin_param=SentencePieceTokenizer.model_file = '{spm_model}'",
               f"--gin_param=make_dataset.corpora = ['{quickstart_records}']",
               "--gin_param=SentenceEncoder.num_layers = 1", "--grad_cache_chunk=0", "--grad_cache_chunk=4"], tmp_path)
    for name in ("precomputed plain", "precomputed cached 4"):
        assert re.search(rf"^{name}\s+8\s+[\d.]+\s+\d+$", out, flags=re.M), out


def test_a_row_per_row_flag_with_its_own_bindings(tmp_path, spm_model, quickstart_records):
    common = [f"{REPO}/tools/benchmarks/bench_train.py", f"--gin_file={REPO}/configs/quickstart.gin", "--batch_size=8",
              "--steps=2", "--warmup=1", f"--gin_param=SentencePieceTokenizer.model_file = '{spm_model}'",
              f"--gin_param=make_dataset.corpora = ['{quickstart_records}']"]
    out = run(common + ["--row=one layer:SentenceEncoder.num_layers = 1",
                        "--row=frozen table:SentenceEncoder.num_layers = 1; train.frozen_embeddings = True"], tmp_path)
    for name in ("precomputed one layer", "precomputed frozen table"):
        assert re.search(rf"^{name}\s+8\s+[\d.]+\s+\d+$", out, flags=re.M), out
    # A row's bindings reach its own run only: this one's bad value fails that row, named.
    failed = subprocess.run([sys.executable, *common, "--row=fine:SentenceEncoder.num_layers = 1", "--row=broken:"
                             "SentenceEncoder.num_layers = 1; make_optimizer.embedding_update = 'sometimes'"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert failed.returncode == 1
    assert "error: variant precomputed broken failed" in failed.stderr and "'sometimes'" in failed.stderr, failed.stderr
    assert "variant precomputed fine failed" not in failed.stderr


def test_a_row_without_a_label_ends_in_one_error_line(tmp_path):
    result = subprocess.run([sys.executable, f"{REPO}/tools/benchmarks/bench_train.py", f"--gin_file={REPO}/configs/quickstart.gin",
                             "--row=train.frozen_embeddings = True"], capture_output=True, text=True, cwd=tmp_path,
                            env=cli_env())
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: --row='train.frozen_embeddings = True' is not LABEL:BINDING[;BINDING...] (the label before the first "
        "colon)"]
