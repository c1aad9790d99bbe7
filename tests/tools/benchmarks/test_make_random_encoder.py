"""tools/benchmarks/make_random_encoder.py: a wider, deeper random BERT with the template's tokenizer that this package loads;
a template it cannot widen ends in one error line."""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
from safetensors.numpy import load_file

from conftest import REPO
from conftest import cli_env
from pretrained_checkpoints import checkpoint
from pretrained_checkpoints import e5_like

TOOL = os.path.join(REPO, "tools", "benchmarks", "make_random_encoder.py")


def _run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, cwd=REPO, env=cli_env())


def test_writes_a_bert_of_the_asked_size_that_loads_and_tokenizes_as_the_template(tmp_path):
    from tf_msemb.models.pretrained import load_pretrained

    template = e5_like(tmp_path / "e5")
    output = tmp_path / "random"
    result = _run(f"--template={template}", f"--output={output}", "--hidden_size=48", "--layers=3", "--heads=4",
                  "--intermediate_size=80")
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((output / "config.json").read_text())
    old = json.loads((tmp_path / "e5" / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]) == (48, 3, 80)
    assert config["vocab_size"] == old["vocab_size"]
    weights = load_file(output / "model.safetensors")
    assert weights["embeddings.word_embeddings.weight"].shape == (old["vocab_size"], 48)
    assert weights["encoder.layer.2.intermediate.dense.weight"].shape == (80, 48)
    assert "encoder.layer.3.output.dense.bias" not in weights
    # BERT's initialization: unit layer-norm scales, zero biases, matrices of standard deviation 0.02.
    assert np.all(weights["encoder.layer.1.output.LayerNorm.weight"] == 1.0)
    assert np.all(weights["encoder.layer.1.attention.self.query.bias"] == 0.0)
    assert abs(weights["embeddings.word_embeddings.weight"].std() - 0.02) < 0.002
    assert json.loads((output / "1_Pooling" / "config.json").read_text())["embedding_dimension"] == 48
    assert "random BERT, 3 layers, 48 wide" in result.stdout

    tokenizer, encoder = load_pretrained(str(output))
    reference_tokenizer, _ = load_pretrained(template)
    sentences = tf.constant(["A dog runs in the park.", "Ein Hund läuft."])
    assert tokenizer.tokenize(sentences).to_list() == reference_tokenizer.tokenize(sentences).to_list()
    assert encoder.output_dim == 48 and encoder(tokenizer(sentences)).shape == (2, 48)


def test_a_template_with_a_dense_module_ends_in_one_error_line(tmp_path):
    result = _run(f"--template={checkpoint('bert_tokenizer_json')}", f"--output={tmp_path / 'out'}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: " + f"{checkpoint('bert_tokenizer_json')} has a Dense module (2_Dense) whose input width would no "
        "longer match; use a template without one."]
    assert not (tmp_path / "out").exists()


def test_a_width_the_heads_do_not_divide_ends_in_one_error_line(tmp_path):
    result = _run(f"--template={checkpoint('bert_wordpiece_uncased')}", f"--output={tmp_path / 'out'}",
                  "--hidden_size=50", "--heads=4")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["error: --heads=4 does not divide --hidden_size=50."]
