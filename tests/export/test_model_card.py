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
from conftest import needs_int8
from tf_msemb.export.model_card import CARD_FILE
from tf_msemb.export.model_card import write_model_card
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.base import RunFacts
from tf_msemb.models.pretrained import describe_source
from tf_msemb.objectives.dual_momentum_contrast import DualMomentumContrast
from tf_msemb.training.trainer import Exporter
from tf_msemb.training.trainer import run_provenance

LOADER_CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loader_checks.py")


def blocks(card, language):
    """The fenced code blocks of `card` in `language`, in order."""
    return re.findall(rf"```{language}\n(.*?)```", card, flags=re.S)


def _env():
    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | {"TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture
def moved(export, tmp_path):
    """The export copied into another directory, as a user who received it would hold it: `(its parent, card)`."""
    import shutil

    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(export, elsewhere / os.path.basename(export))
    card = open(elsewhere / os.path.basename(export) / CARD_FILE, encoding="utf-8").read()
    assert os.path.dirname(export) not in card
    return elsewhere, card


@pytest.mark.slow
def test_every_python_snippet_of_the_card_runs_where_the_export_was_moved(moved):
    elsewhere, card = moved
    snippets = blocks(card, "python")
    assert [("saved_model.load" in s, "TFSMLayer" in s, "hub.KerasLayer" in s) for s in snippets] == [
        (True, False, False), (False, True, False), (False, False, True)]
    for snippet in snippets:
        assert snippet.count("export_dir = 'model'") == 1
        result = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, cwd=elsewhere,
                                env=_env())
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip().splitlines()[-1] == "(2, 16)", result.stdout


def test_the_tf_serving_snippets_give_a_version_that_tf_serving_s_loader_serves(moved):
    elsewhere, card = moved
    shell = blocks(card, "sh")
    copy = subprocess.run(["bash", "-c", shell[0]], capture_output=True, text=True, cwd=elsewhere)
    assert copy.returncode == 0, copy.stderr
    config = text_format.Parse((elsewhere / "models.config").read_text(), model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert model.base_path == str(elsewhere / "serving" / "tf_msemb")
    versions = [name for name in os.listdir(model.base_path) if name.isdigit()]
    assert model.model_platform == "tensorflow" and versions == ["1"]
    # What the model server does with the version: a Session over `serve`, the warm-up requests replayed.
    out = elsewhere / "session.npz"
    result = subprocess.run([sys.executable, LOADER_CHECKS, "session", os.path.join(model.base_path, "1"), str(out)],
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    served = np.load(out)
    np.testing.assert_allclose(served["vectors"], served["expected"], atol=1e-5)
    assert len(served["warmup_sizes"]) > 0
    assert "tensorflow_model_server" in shell[1] and "--model_config_file=models.config" in shell[1]


def test_the_beam_snippet_encodes_a_corpus(moved):
    elsewhere, card = moved
    command = blocks(card, "sh")[-1]
    assert command.splitlines()[1].startswith("python -m tf_msemb.pipelines.encode")
    (elsewhere / "corpus").mkdir()
    (elsewhere / "corpus" / "a.txt").write_text("Ein Hund läuft.\nA dog runs.\n", encoding="utf-8")
    result = subprocess.run(["bash", "-c", command.replace("python ", f"{sys.executable} ", 1)], cwd=elsewhere,
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((elsewhere / "encoded" / "encoded.json").read_text())
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


def _tiny_momentum_contrast(tokenizer, nli_path):
    """An objective with a path among its options (`nli_path`, unread while `nli_weight` is 0)."""
    keras.utils.set_random_seed(0)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length, hidden_dim=16,
                              num_layers=1, num_heads=2, intermediate_dim=32, dropout=0.0)
    model = DualMomentumContrast(encoder, queue_size=8, nli_path=nli_path, run=RunFacts(tokenizer, 10, 4))
    model.build()
    return model


def _files_holding(directory, needles):
    """`{relative file: [needles it holds]}` over every file under `directory`, binary ones included."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            data = open(os.path.join(root, name), "rb").read()
            held = [needle for needle in needles if needle.encode("utf-8") in data]
            if held:
                found[os.path.relpath(os.path.join(root, name), directory)] = held
    return found


@pytest.mark.slow
def test_a_training_export_s_card_names_its_recipe_data_start_and_dev_figures_up_to_its_step(tokenizer, tmp_path,
                                                                                              monkeypatch):
    checkout = tmp_path / "checkout"  # where the user runs from; every input lies outside it
    run = checkout / "runs" / "exp1"
    run.mkdir(parents=True)
    start = tmp_path / "models" / "e5-small"
    stage1 = tmp_path / "stage1" / "ckpt-100"  # a checkpoint prefix: no such file, so never an existing path
    nli = tmp_path / "nli" / "snli.jsonl"
    # The run's gin config, as gin writes it: every path binding absolute.
    (checkout / "configs").mkdir()
    (run / "operative_config.gin").write_text(
        f"train.num_steps = 10\ntrain.pretrained = '{start}'\ntrain.init_from = '{stage1}'\n"
        f"DualMomentumContrast.nli_path = '{nli}'\n", encoding="utf-8")
    with open(run / "eval_results.jsonl", "w", encoding="utf-8") as f:
        for step, value in ((5, 0.25), (10, 0.75)):
            f.write(json.dumps({"step": step, "retrieval/mean": value, "retrieval/a / b/mean": value}) + "\n")
    manifest = tmp_path / "data" / "x.manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({"prefix": "x", "pairs": {"en-de": {"examples": 1200}, "en-fr": {"examples": 34}}}))
    start.mkdir(parents=True)
    (start / "config.json").write_text(json.dumps({"_name_or_path": "/home/someone/e5", "architectures": ["BertModel"],
                                                   "model_type": "bert", "num_hidden_layers": 12, "hidden_size": 384,
                                                   "vocab_size": 250037}))
    # Run from a checkout: a gin file inside it stays relative, one outside a name;
    # bindings on the command line name absolute paths, as users write them.
    monkeypatch.chdir(checkout)
    params = [f"train.pretrained = '{start}'", f'train.init_from = "{stage1}"', "x = 1"]
    provenance = run_provenance("runs/exp1", {"gin_files": ["configs/quickstart.gin", f"{REPO}/configs/moco.gin"],
                                              "gin_params": params}, [str(manifest)], str(stage1), 10, 4)
    exporter = Exporter(_tiny_momentum_contrast(tokenizer, str(nli)), "runs/exp1", chief=True, provenance=provenance)
    path = exporter(5)
    card = open(os.path.join(path, CARD_FILE), encoding="utf-8").read()
    metadata_text = open(os.path.join(path, "tf_msemb_export.json"), encoding="utf-8").read()
    metadata = json.loads(metadata_text)
    assert metadata["provenance"]["dev_results"] == [{"step": 5, "retrieval/mean": 0.25, "retrieval/a / b/mean": 0.25}]
    assert metadata["provenance"]["data"] == [{"file": "x.manifest.json", "examples": 1234}]
    assert metadata["objective"]["nli_path"] == "snli.jsonl"
    assert "| recipe | configs/quickstart.gin, moco.gin |" in card
    assert ("| bindings on the command line | train.pretrained = 'e5-small'; train.init_from = \"ckpt-100\"; x = 1 |"
            in card)
    assert "| data | x.manifest.json (1,234 examples) |" in card and "| training run | runs/exp1 |" in card
    assert "| start checkpoint | ckpt-100 |" in card
    assert "| steps | 5 of 10, global batch 4 |" in card and "| objective | DualMomentumContrast |" in card
    assert "| step | retrieval/mean |" in card and "| 5 | 0.2500 |" in card and "| 10 |" not in card
    config = open(os.path.join(path, "operative_config.gin"), encoding="utf-8").read()
    assert config.endswith("train.num_steps = 10\ntrain.pretrained = 'e5-small'\ntrain.init_from = 'ckpt-100'\n"
                           "DualMomentumContrast.nli_path = 'snli.jsonl'\n") and config.startswith("# ")
    # No path of this machine anywhere in the export, binary files included, however the run was given its files.
    writer = [str(tmp_path), REPO, "/home/someone", os.path.expanduser("~") + "/"]
    assert _files_holding(path, writer) == {}
    # A numbered version is what TF Serving serves: the card points at its folder, no copy.
    assert "This export is one (version 5)" in card and "cp -r" not in card
    # The start by name and config.json identity where it exists.
    assert describe_source(str(start)) == {"name": "e5-small", "config": {
        "architectures": ["BertModel"], "model_type": "bert", "num_hidden_layers": 12, "hidden_size": 384,
        "vocab_size": 250037}}

    exporter(10, final=True)
    exporter.copy_as_best(10, {"metric": "retrieval/mean", "mode": "max", "value": 0.75, "step": 10})
    best = open(run / "export" / "best" / CARD_FILE, encoding="utf-8").read()
    assert "| 10 | 0.7500 |" in best and "best step by `retrieval/mean` (max): step 10, 0.75" in best
    assert "export_dir = 'best'" in best and "serving/tf_msemb/10" in best
    assert _files_holding(run / "export", writer) == {}


def _export_pretrained(tmp_path, *flags):
    from pretrained_checkpoints import checkpoint

    directory = checkpoint("bert_wordpiece_uncased")
    result = subprocess.run([sys.executable, "tools/export_pretrained.py", f"--model={directory}",
                             f"--output={tmp_path / 'out'}", *flags], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return directory, open(tmp_path / "out" / CARD_FILE, encoding="utf-8").read()


def test_export_pretrained_writes_a_card_naming_its_source(tmp_path):
    directory, card = _export_pretrained(tmp_path)
    assert "| source | bert_wordpiece_uncased (config.json: BertModel" in card
    # Paths inside the working directory (the checkout here) stay relative; others become names.
    assert ("| command | `python tools/export_pretrained.py --model=tests/fixtures/pretrained/bert_wordpiece_uncased "
            "--output=out` |") in card
    assert str(tmp_path) not in card and os.path.dirname(directory) not in card
    assert "No dev figures are recorded for an export of a pretrained checkpoint" in card
    assert "| default prompt name | none |" in card
    assert "| compute precision | float32 |" in card and "| CPU it needs (checked when it loads) | any |" in card


@pytest.mark.slow
@needs_int8
def test_an_int8_card_names_its_calibration_and_what_it_needs_of_the_cpu(tmp_path):
    from tf_msemb.inference.int8_calibration import Int8Options
    from tf_msemb.inference.packed import int8_support

    calibration = tmp_path / "calibration.txt"
    calibration.write_text("a dog runs\nthe woman reads a book in the park\nkids\n", encoding="utf-8")
    _, card = _export_pretrained(tmp_path, "--precision=int8", f"--calibration_file={calibration}")
    assert ("| compute precision | int8 (calibrated on the first 2000 lines at most of calibration.txt (3 lines), "
            in card)
    metadata = (tmp_path / "out" / "tf_msemb_export.json").read_text(encoding="utf-8")
    assert str(tmp_path) not in card and str(tmp_path) not in metadata
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
    assert "| named prompts (applied by callers) | query: 'query: ' |" in card
    assert "export_dir = 'copy'" in card and "export_dir = 'model'" not in card and str(tmp_path) not in card
    assert tf.saved_model.contains_saved_model(copy)
