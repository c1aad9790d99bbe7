"""configs/distill_paper.gin (seed 001 at the paper's settings) runs end to end as a smoke run, the tiny
XLM-R and BERT checkpoints bound as its student and teacher, as a user binds the real ones."""

import json
import os

import pytest

from conftest import REPO
from conftest import SHARED_DATA
from conftest import run
from pretrained_checkpoints import checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.skipif(not os.path.isdir(SHARED_DATA),
                                                   reason=f"the recipe's dev pairs are read from {SHARED_DATA}")]


def test_distill_paper_smoke_run_with_local_student_and_teacher(tmp_path, quickstart_records):
    model_dir = tmp_path / "distill"
    out = run(["-m", "tf_msemb.train", "--gin_file=configs/distill_paper.gin", f"--model_dir={model_dir}", "--smoke",
               f"--gin_param=STUDENT = '{checkpoint('xlm_roberta')}'",
               f"--gin_param=TEACHER = '{checkpoint('bert_wordpiece_uncased')}'",
               f"--gin_param=make_dataset.corpora = ['{quickstart_records}']"], REPO)
    assert "step 3/3 loss" in out and "mse_tgt" in out and "eval step 3 " in out and " | best " in out
    metadata = json.loads((model_dir / "export" / "best" / "tf_msemb_export.json").read_text())
    assert metadata["tokenizer"]["class"] == "FairseqSentencePieceTokenizer"  # the student's, not the teacher's
    assert metadata["inference"] == "packed" and metadata["embedding_dim"] == 32
    # The teacher by its path relative to the working directory: an export names no absolute path of its writer.
    assert metadata["objective"]["teacher"] == os.path.relpath(checkpoint("bert_wordpiece_uncased"), REPO)
