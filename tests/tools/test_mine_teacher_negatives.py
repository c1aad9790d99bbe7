"""tools/mine_teacher_negatives.py on a corpus with tiny teacher vectors: records the TeacherNegatives feature reads."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from conftest import REPO
from conftest import run
from tf_msemb.data.features import TeacherNegatives
from tf_msemb.data.features import TeacherVectors
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.teacher_vectors import add_teacher_vectors
from tf_msemb.models.encoder import SentenceEncoder

TOOL = os.path.join(REPO, "tools", "mine_teacher_negatives.py")


def test_the_tool_writes_negatives_from_the_stored_vectors_and_keeps_finished_shards(tokenizer, quickstart_records,
                                                                                    tmp_path):
    keras.utils.set_random_seed(5)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=8, num_layers=1, num_heads=2, intermediate_dim=16,
                              max_sequence_length=tokenizer.max_length)
    add_teacher_vectors(quickstart_records, tokenizer, encoder, "tiny", str(tmp_path / "t"), verbose=False)
    args = [TOOL, f"--manifest={tmp_path}/t/qs.manifest.json", f"--output_dir={tmp_path}/n", "--num_negatives=3",
            "--candidates=8", "--ceiling=1.5"]
    out = run(args, tmp_path)
    assert "en-de:" in out and "records with 3 teacher negatives; 0 dropped" in out
    manifest = json.loads((tmp_path / "n" / "qs.manifest.json").read_text())
    assert manifest["teacher_negatives"] == {"count": 3, "ceiling": 1.5}
    batch = next(iter(make_dataset([str(tmp_path / "n" / "qs.manifest.json")], tokenizer, 4, max_tokens=48,
                                   features=[TeacherVectors(8), TeacherNegatives(3, 8)])))
    negatives, teacher = batch["teacher_negatives"].numpy(), batch["teacher"].numpy()
    assert negatives.shape == (4, 3, 8)
    # Never the source's own vector.
    assert not np.isclose(negatives, teacher[:, None, :]).all(axis=-1).any()

    shard = tmp_path / "n" / manifest["pairs"]["en-de"]["files"][0]
    kept = tmp_path / "n" / manifest["pairs"]["en-fr"]["files"][0]
    kept_mtime = os.path.getmtime(kept)
    shard.unlink()
    run(args, tmp_path)
    assert shard.exists() and os.path.getmtime(kept) == kept_mtime
    # Other settings into the same folder (the count, or the candidates searched): one error line, no shard reused.
    for changed in (["--num_negatives=2", "--candidates=8"], ["--num_negatives=3", "--candidates=9"]):
        result = subprocess.run([sys.executable, *args[:3], *changed, "--ceiling=1.5"], capture_output=True,
                                text=True, cwd=tmp_path)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("error:") and "another input or settings" in last, changed
    # The chunk size changes no answer: the same folder is taken.
    run([*args, "--chunk_size=7"], tmp_path)


def test_a_corpus_without_teacher_vectors_is_one_error_line(quickstart_records, tmp_path):
    result = subprocess.run([sys.executable, TOOL, f"--manifest={quickstart_records}", f"--output_dir={tmp_path}/n"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("error:") and "no teacher vectors" in result.stderr
    assert "Traceback" not in result.stderr
