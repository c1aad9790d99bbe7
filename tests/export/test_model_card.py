"""The model card in every export (export.model_card): its facts from the metadata and the run, and every
loading snippet run as written."""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from conftest import REPO
from tf_msemb.export.model_card import CARD_FILE
from tf_msemb.export.model_card import write_model_card
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.base import RunFacts
from tf_msemb.objectives.translation_ranking import TranslationRanking
from tf_msemb.training.trainer import Exporter
from tf_msemb.training.trainer import run_provenance

LOADER_CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loader_checks.py")


def blocks(card, language):
    """The fenced code blocks of `card` in `language`, in order."""
    return re.findall(rf"```{language}\n(.*?)```", card, flags=re.S)


def _env():
    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | {"TF_CPP_MIN_LOG_LEVEL": "2"}


def test_every_python_snippet_of_the_card_runs_as_written(export, tmp_path):
    card = (open(os.path.join(export, CARD_FILE), encoding="utf-8")).read()
    snippets = blocks(card, "python")
    assert [("saved_model.load" in s, "TFSMLayer" in s, "hub.KerasLayer" in s) for s in snippets] == [
        (True, False, False), (False, True, False), (False, False, True)]
    for snippet in snippets:
        assert export in snippet
        result = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, cwd=tmp_path,
                                env=_env())
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip().splitlines()[-1] == "(2, 16)", result.stdout


def test_the_tf_serving_snippets_give_a_version_that_tf_serving_s_loader_serves(export, tmp_path):
    card = open(os.path.join(export, CARD_FILE), encoding="utf-8").read()
    shell = blocks(card, "sh")
    copy = subprocess.run(["bash", "-c", shell[0]], capture_output=True, text=True)
    assert copy.returncode == 0, copy.stderr
    config = text_format.Parse(blocks(card, "text")[0], model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    versions = [name for name in os.listdir(model.base_path) if name.isdigit()]
    assert model.model_platform == "tensorflow" and versions == ["1"]
    # What the model server does with the version: a Session over `serve`, the warm-up requests replayed.
    out = tmp_path / "session.npz"
    result = subprocess.run([sys.executable, LOADER_CHECKS, "session", os.path.join(model.base_path, "1"), str(out)],
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    served = np.load(out)
    np.testing.assert_allclose(served["vectors"], served["expected"], atol=1e-5)
    assert len(served["warmup_sizes"]) > 0
    assert "tensorflow_model_server" in shell[1] and "--model_config_file=models.config" in shell[1]


def test_the_beam_snippet_encodes_a_corpus(export, tmp_path):
    card = open(os.path.join(export, CARD_FILE), encoding="utf-8").read()
    command = blocks(card, "sh")[-1]
    assert command.startswith("python -m tf_msemb.pipelines.encode")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("Ein Hund läuft.\nA dog runs.\n", encoding="utf-8")
    result = subprocess.run(["bash", "-c", command.replace("python ", f"{sys.executable} ", 1)], cwd=tmp_path,
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "encoded" / "encoded.json").read_text())
    assert manifest["sentences"] == 2 and manifest["dim"] == 16, manifest


def test_the_card_says_what_the_model_is(export):
    card = open(os.path.join(export, CARD_FILE), encoding="utf-8").read()
    metadata = json.load(open(os.path.join(export, "tf_msemb_export.json"), encoding="utf-8"))
    assert "| embedding dimension | 16 |" in card
    assert "SentenceEncoder: num_layers 1, hidden_dim 16, num_heads 2, intermediate_dim 32" in card
    assert f"| vocabulary | SentencePieceTokenizer ({metadata['tokenizer']['asset']}) |" in card
    assert f"| longest input | {metadata['max_tokens']} tokens" in card
    assert "| compute precision | float32 |" in card and "| ops beyond stock TensorFlow and tensorflow-text | none |" \
        in card


def _tiny_ranking(tokenizer):
    keras.utils.set_random_seed(0)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length, hidden_dim=16,
                              num_layers=1, num_heads=2, intermediate_dim=32, dropout=0.0)
    model = TranslationRanking(encoder, run=RunFacts(tokenizer, 10, 4))
    model.build()
    return model


def test_a_training_export_s_card_names_its_recipe_data_start_and_dev_figures_up_to_its_step(tokenizer, tmp_path):
    (tmp_path / "operative_config.gin").write_text("train.num_steps = 10\n", encoding="utf-8")
    with open(tmp_path / "eval_results.jsonl", "w", encoding="utf-8") as f:
        for step, value in ((5, 0.25), (10, 0.75)):
            f.write(json.dumps({"step": step, "retrieval/mean": value, "retrieval/a / b/mean": value}) + "\n")
    provenance = run_provenance(str(tmp_path), {"gin_files": ["configs/quickstart.gin"], "gin_params": ["x = 1"]},
                                ["runs/x/data/x.manifest.json"], "all-MiniLM-L6-v2", 10, 4)
    exporter = Exporter(_tiny_ranking(tokenizer), str(tmp_path), chief=True, provenance=provenance)
    path = exporter(5)
    card = open(os.path.join(path, CARD_FILE), encoding="utf-8").read()
    metadata = json.load(open(os.path.join(path, "tf_msemb_export.json"), encoding="utf-8"))
    assert metadata["provenance"]["dev_results"] == [{"step": 5, "retrieval/mean": 0.25, "retrieval/a / b/mean": 0.25}]
    assert "| recipe | configs/quickstart.gin |" in card and "| bindings on the command line | x = 1 |" in card
    assert "| data | runs/x/data/x.manifest.json |" in card
    assert "| start checkpoint | all-MiniLM-L6-v2 |" in card and "| steps | 5 of 10, global batch 4 |" in card
    assert "| objective | TranslationRanking |" in card
    assert "| step | retrieval/mean |" in card and "| 5 | 0.2500 |" in card and "| 10 |" not in card
    assert open(os.path.join(path, "operative_config.gin"), encoding="utf-8").read() == "train.num_steps = 10\n"
    # A numbered version is what TF Serving serves: the card points at its folder, no copy.
    assert f'base_path: "{tmp_path / "export"}"' in card and "cp -r" not in card

    exporter(10, final=True)
    exporter.copy_as_best(10, {"metric": "retrieval/mean", "mode": "max", "value": 0.75, "step": 10})
    best = open(tmp_path / "export" / "best" / CARD_FILE, encoding="utf-8").read()
    assert "| 10 | 0.7500 |" in best and "best step by `retrieval/mean` (max): step 10, 0.75" in best
    assert str(tmp_path / "export" / "best") in best and str(tmp_path / "export" / "10\"") not in best


@pytest.mark.int8
def test_export_pretrained_writes_a_card_naming_its_source_and_int8_needs(tmp_path):
    from tf_msemb.inference.int8_calibration import Int8Options
    from tf_msemb.inference.packed import int8_support
    from pretrained_checkpoints import checkpoint

    directory = checkpoint("bert_wordpiece_uncased")
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("a dog runs\nthe woman reads a book in the park\nkids\n", encoding="utf-8")
    precision = ["--precision=int8", f"--calibration_file={calibration}"] if not int8_support().unsupported else []
    result = subprocess.run([sys.executable, "tools/export_pretrained.py", f"--model={directory}",
                             f"--output={tmp_path / 'out'}", *precision], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    card = open(tmp_path / "out" / CARD_FILE, encoding="utf-8").read()
    assert f"| source | {directory} |" in card and "tools/export_pretrained.py --model=" in card
    assert "No dev figures are recorded for an export of a pretrained checkpoint" in card
    assert "| default prompt name | none |" in card
    if precision:
        assert "| compute precision | int8 (calibrated on the first 2000 lines at most of" in card
        options = Int8Options().for_cpu(int8_support().kernels)
        scaled = "pair of rows" if options.weight_scale == "paired" else "column"
        assert re.search(f"minmax activation ranges; weights scaled per {scaled}; attention in "
                         f"{options.attention}; in {options.fallback_dtype}: layers: none; float32 GELU channels: "
                         r"(none|\d+ \(layers [\d, ]+\)); held-out sentence cosine to float32", card), card
        assert "_QuantizedMatMul" in card and "x86-64 builds of TensorFlow" in card
        needs = "; ".join(f"{' or '.join(isas)} for {purpose}" for isas, purpose in options.cpu_requirements())
        assert f"| CPU it needs (checked when it loads) | {needs} |" in card


def test_rendering_again_follows_the_metadata(export, tmp_path):
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(export, copy)
    metadata_file = os.path.join(copy, "tf_msemb_export.json")
    metadata = json.load(open(metadata_file, encoding="utf-8"))
    metadata["prompts"] = {"query": "query: "}
    json.dump(metadata, open(metadata_file, "w", encoding="utf-8"))
    card = open(write_model_card(copy), encoding="utf-8").read()
    assert "| named prompts (applied by callers) | query: 'query: ' |" in card and copy in card and export not in card
    assert tf.saved_model.contains_saved_model(copy)
