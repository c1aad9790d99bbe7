"""tools/principal_axes.py on a tiny export: the rotated export keeps every cosine, its cut keeps more energy than
the raw cut, and TF Serving's loader serves the cut."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import run
from tf_msemb.data.corpora import record_pairs
from tf_msemb.export.saved_model import METADATA_FILE

TOOL = os.path.join(REPO, "tools", "principal_axes.py")
CHECKS = os.path.join(REPO, "tests", "export", "loader_checks.py")


def served(path, sentences):
    return tf.saved_model.load(path).signatures["serving_default"](inputs=tf.constant(sentences))["outputs"].numpy()


@pytest.fixture(scope="module")
def rotated(export, quickstart_records, tmp_path_factory):
    out = tmp_path_factory.mktemp("axes")
    common = [TOOL, f"--model={export}", f"--corpus={quickstart_records}", "--per_language=80"]
    printed = run([*common, f"--output={out}/full"], out)
    run([*common, "--output_dim=4", f"--output={out}/cut"], out)
    return str(out / "full"), str(out / "cut"), printed


def corpus_sentences(manifest):
    return sorted({side for _, _, rows in record_pairs(manifest) for row in rows for side in row if side})


def test_the_rotated_export_keeps_every_cosine_and_its_first_dimensions_the_most_energy(export, rotated,
                                                                                     quickstart_records):
    full, _, printed = rotated
    assert "Energy kept:" in printed and "en 80" in printed
    sentences = corpus_sentences(quickstart_records)[:300]
    raw, turned = served(export, sentences), served(full, sentences)
    np.testing.assert_allclose(turned @ turned.T, raw @ raw.T, atol=1e-5)
    assert not np.allclose(turned, raw, atol=1e-3)

    def kept(vectors, width=4):
        return float((vectors[:, :width] ** 2).sum() / len(vectors))

    assert kept(turned) > kept(raw) + 0.05
    metadata = json.load(open(os.path.join(full, METADATA_FILE), encoding="utf-8"))
    axes = metadata["provenance"]["principal_axes"]
    assert axes["sentences"] == {"de": 80, "en": 80, "es": 80, "fr": 80}
    assert metadata["encoder"]["class_name"] == "PrincipalAxes"
    assert "principal axes" in open(os.path.join(full, "README.md"), encoding="utf-8").read()


def test_the_cut_export_is_the_rotated_vectors_first_dimensions_through_tf_servings_loader(rotated, tmp_path):
    full, cut, _ = rotated
    out = tmp_path / "session.npz"
    result = subprocess.run([sys.executable, CHECKS, "session", cut, str(out)], capture_output=True, text=True,
                            cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    session = dict(np.load(out))
    sys.path.insert(0, os.path.dirname(CHECKS))
    from loader_checks import SENTENCES

    first = served(full, SENTENCES)[:, :4]
    np.testing.assert_allclose(session["vectors"], first / np.linalg.norm(first, axis=1, keepdims=True), atol=1e-5)
    np.testing.assert_allclose(session["warmup_norms"], 1.0, rtol=1e-5)
    assert json.load(open(os.path.join(cut, METADATA_FILE), encoding="utf-8"))["embedding_dim"] == 4


@pytest.mark.parametrize("flags, message", [
    (["--per_language=2"], "need at least 16"),
    (["--languages=en,xx"], "--languages names xx"),
    (["--cut"], "cut to 4 of 16 dimensions"),
    (["--turn_steps=5", "--turn_widths=8,16"], "--turn_widths=8,16: each must lie below"),
])
def test_a_sample_too_small_a_missing_language_or_a_cut_export_is_one_error_line(export, rotated, quickstart_records,
                                                                                tmp_path, flags, message):
    model = rotated[1] if flags == ["--cut"] else export
    flags = [] if flags == ["--cut"] else flags
    result = subprocess.run([sys.executable, TOOL, f"--model={model}", f"--corpus={quickstart_records}",
                             f"--output={tmp_path}/x", *flags], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last


def test_every_corpus_gives_its_own_share_of_the_sample(export, quickstart_records, tmp_path):
    from tf_msemb.data.writing import write_tfrecords

    # A small corpus beside the large one: sampling the union would take its sentences at their share of it.
    rows = [(f"Sentence number {i} of the small corpus.", f"Satz Nummer {i} des kleinen Korpus.") for i in range(30)]
    write_tfrecords([("en", "de", rows)], str(tmp_path / "small"), "small", num_shards=1, verbose=False)
    run([TOOL, f"--model={export}", f"--corpus={quickstart_records}", f"--corpus={tmp_path}/small/small.manifest.json",
         "--languages=en", "--per_language=25", f"--output={tmp_path}/axes"], tmp_path)
    metadata = json.load(open(tmp_path / "axes" / METADATA_FILE, encoding="utf-8"))
    assert metadata["provenance"]["principal_axes"]["sentences"] == {"en": 50}


def test_the_turned_export_keeps_every_cosine_and_records_its_turn(export, quickstart_records, tmp_path):
    """--turn_steps: still a rotation of the source's vectors (full-width cosines equal), not the plain axes, and
    the provenance holds the losses the turn printed."""
    common = [TOOL, f"--model={export}", f"--corpus={quickstart_records}", "--per_language=80"]
    run([*common, "--turn_steps=0", f"--output={tmp_path}/axes"], tmp_path)
    printed = run([*common, "--turn_steps=40", "--turn_widths=8,4", f"--output={tmp_path}/turned"], tmp_path)
    assert "Nested similarity loss on the sample" in printed
    sentences = corpus_sentences(quickstart_records)[:300]
    raw, axes, turned = (served(path, sentences) for path in (export, f"{tmp_path}/axes", f"{tmp_path}/turned"))
    np.testing.assert_allclose(turned @ turned.T, raw @ raw.T, atol=1e-5)
    assert not np.allclose(turned, axes, atol=1e-3)
    turn = json.load(open(tmp_path / "turned" / METADATA_FILE, encoding="utf-8"))["provenance"]["principal_axes"]["turned"]
    assert turn["steps"] == 40 and turn["widths"] == [8, 4] and turn["loss_turned"] < turn["loss_axes"]
    assert "| turned axes | 40 steps" in open(tmp_path / "turned" / "README.md", encoding="utf-8").read()
