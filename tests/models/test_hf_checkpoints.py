"""Local Hugging Face / sentence-transformers checkpoints of each supported architecture against the reference.

Fixtures: tools/fixtures/make_parity_fixtures.py (torch 2.13.0, sentence-transformers 6.2), no torch here.
"""

import json
import os
import re
import shutil
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import run
from tf_msemb.models.pretrained import load_pretrained
from pretrained_checkpoints import FIXTURES
from pretrained_checkpoints import load_reference

NAMES = ["bert_wordpiece_uncased", "bert_wordpiece_cased", "distilbert", "bert_sentencepiece", "xlm_roberta",
         "roberta", "bert_tokenizer_json", "roberta_tokenizer_json", "xlm_roberta_tokenizer_json"]
# sentence-transformers' pooling modes -> ours.
POOLING_NAMES = {"cls": "first", "mean_sqrt_len_tokens": "mean_sqrt_len"}


@pytest.fixture(scope="module", params=NAMES)
def loaded(request):
    return request.param, load_pretrained(os.path.join(FIXTURES, request.param))


def test_ids_settings_and_vectors_equal_the_reference(loaded):
    name, (tokenizer, encoder) = loaded
    reference = load_reference(name)
    sentences = tf.constant(reference["sentences"])
    assert tokenizer.tokenize(sentences).to_list() == reference["token_ids"]
    assert tokenizer.max_length == reference["max_seq_length"]
    pooled = encoder.encoder if "dense" in reference else encoder
    assert pooled.pooling_spec == "+".join(POOLING_NAMES.get(p, p) for p in reference["pooling"].split("+"))
    assert encoder.normalize == reference["normalize"]
    assert encoder.output_dim == len(reference["vectors"][0])
    np.testing.assert_allclose(encoder(tokenizer(sentences)).numpy(), reference["vectors"], rtol=0, atol=1e-5)


# A SavedModel a kind: the first kind in the default suite, the rest with the slow tests.
@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if name != NAMES[0] else [])
                                  for name in NAMES])
def test_an_export_reloads_with_the_same_vectors(name, tmp_path):
    from tf_msemb.export.saved_model import export_saved_model

    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, name))
    reference = load_reference(name)
    model = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path / name)))
    # Raw strings in: a default prompt is applied inside.
    np.testing.assert_allclose(model(tf.constant(reference["sentences"])).numpy(), _unit(reference["vectors"]),
                               rtol=0, atol=1e-5)


def _unit(vectors):
    """Exports are unit-length."""
    vectors = np.array(vectors, np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_a_clone_from_config_computes_the_same(loaded):
    """The backbone keeps the checkpoint's activation and layer-norm epsilon in its config (momentum encoders clone)."""
    name, (tokenizer, encoder) = loaded
    clone = type(encoder).from_config(encoder.get_config())
    ids = tokenizer(tf.constant(load_reference(name)["sentences"]))
    clone(ids)
    clone.set_weights(encoder.get_weights())
    np.testing.assert_allclose(clone(ids).numpy(), encoder(ids).numpy(), rtol=0, atol=1e-6)


def _copy(tmp_path, name):
    target = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), target)
    return target


def _edit_config(directory, **changes):
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config | changes))


def test_an_unsupported_architecture_is_named_with_the_supported_ones(tmp_path):
    directory = _copy(tmp_path, "bert_wordpiece_cased")
    _edit_config(directory, model_type="gpt2")
    with pytest.raises(ValueError, match=r"model_type 'gpt2'; supported: bert, distilbert, roberta, xlm-roberta"):
        load_pretrained(str(directory))


@pytest.mark.parametrize("name, missing", [("bert_wordpiece_uncased", "vocab.txt"),
                                           ("xlm_roberta", "sentencepiece.bpe.model"),
                                           ("roberta", "merges.txt")])
def test_a_missing_tokenizer_file_is_named(tmp_path, name, missing):
    directory = _copy(tmp_path, name)
    os.remove(directory / missing)
    if os.path.exists(directory / "tokenizer.json"):
        os.remove(directory / "tokenizer.json")
    with pytest.raises(FileNotFoundError, match=rf"{missing} not found \(nor tokenizer.json\)"):
        load_pretrained(str(directory))


@pytest.mark.parametrize("name, change, tensor", [
    ("bert_wordpiece_cased", {"vocab_size": 716}, "embeddings.word_embeddings.weight"),
    ("distilbert", {"hidden_dim": 48}, "transformer.layer.0.ffn.lin1.weight"),
    ("xlm_roberta", {"intermediate_size": 48}, "encoder.layer.0.intermediate.dense.weight"),
])
def test_weights_that_do_not_match_the_config_name_the_tensor(tmp_path, name, change, tensor):
    directory = _copy(tmp_path, name)
    _edit_config(directory, **change)
    with pytest.raises(ValueError, match=rf"tensor \S*{tensor} has shape"):
        load_pretrained(str(directory))


def test_a_missing_tensor_is_named(tmp_path):
    from safetensors.numpy import load_file
    from safetensors.numpy import save_file

    directory = _copy(tmp_path, "bert_sentencepiece")
    tensors = load_file(str(directory / "model.safetensors"))
    del tensors["encoder.layer.1.attention.self.key.bias"]
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks the tensor encoder.layer.1.attention.self.key.bias"):
        load_pretrained(str(directory))


def test_a_tanh_gelu_checkpoint_gets_keras_hubs_tanh_gelu(tmp_path):
    directory = _copy(tmp_path, "bert_wordpiece_cased")
    _edit_config(directory, hidden_act="gelu_new")
    _, encoder = load_pretrained(str(directory))
    layer = encoder.backbone.transformer_layers[0]
    assert keras.activations.serialize(layer.activation)["config"] == "keras_hub>gelu_approximate"


def test_importing_the_trainer_leaves_keras_hubs_private_converters_unloaded(tmp_path):
    """keras_hub.src is not public API: only loading a Hugging Face checkpoint imports its converters."""
    code = ("import json, sys, tf_msemb.train, tf_msemb.models; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('keras_hub.src.utils.transformers', "
            "'tf_msemb.models.hf_checkpoint')))))")
    assert json.loads(run(["-c", code], tmp_path).splitlines()[-1]) == ["tf_msemb.models.hf_checkpoint"]


def test_a_keras_hub_without_the_private_converters_fails_the_load_naming_the_module_and_the_pin(monkeypatch):
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
        pin = re.search(r'"(keras-hub[^"]*)"', f.read()).group(1)
    monkeypatch.setitem(sys.modules, "keras_hub.src.utils.transformers", None)
    with pytest.raises(ImportError) as error:
        load_pretrained(os.path.join(FIXTURES, "bert_wordpiece_cased"))
    message = str(error.value).splitlines()[0]  # the line a command prints (gin adds one naming load_pretrained)
    assert "keras-hub's private module keras_hub.src.utils.transformers" in message and f"'{pin}'" in message
