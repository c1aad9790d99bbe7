"""sentence-transformers' Pooling, Dense, Normalize modules and prompts of local checkpoints against the reference.

Fixtures: tools/fixtures/make_parity_fixtures.py (bert_tokenizer_json: mean+cls pooling, Dense 64 -> 24 tanh, Normalize;
roberta_tokenizer_json: 2.x flags cls+mean+mean_sqrt_len; xlm_roberta_tokenizer_json: prompts, default "query").
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.heads import DenseHead
from tf_msemb.models.pretrained import load_pretrained
from pretrained_checkpoints import FIXTURES
from pretrained_checkpoints import load_reference


def _copy(tmp_path, name):
    target = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), target)
    return target


def _edit(path, **changes):
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_legacy_flags_concatenate_in_sentence_transformers_order_not_the_files():
    """The file lists the flags sorted (cls, ..., mean_sqrt_len, mean); sentence-transformers concatenates mean first."""
    _, encoder = load_pretrained(os.path.join(FIXTURES, "roberta_tokenizer_json"))
    assert encoder.pooling_spec == "first+mean+mean_sqrt_len" and encoder.output_dim == 96


def test_a_dense_module_is_a_head_with_its_activation_and_weights():
    from safetensors.numpy import load_file

    _, encoder = load_pretrained(os.path.join(FIXTURES, "bert_tokenizer_json"))
    assert isinstance(encoder, DenseHead) and encoder.encoder.pooling_spec == "mean+first"
    assert not encoder.encoder.normalize and encoder.normalize
    (layer,) = encoder.dense
    assert layer.activation.__name__ == "tanh"
    tensors = load_file(os.path.join(FIXTURES, "bert_tokenizer_json", "2_Dense", "model.safetensors"))
    np.testing.assert_array_equal(layer.kernel.numpy(), tensors["linear.weight"].T)


def test_the_default_prompt_applies_and_a_named_or_literal_prompt_replaces_it():
    reference = load_reference("xlm_roberta_tokenizer_json")
    sentences = tf.constant(reference["sentences"])
    directory = os.path.join(FIXTURES, "xlm_roberta_tokenizer_json")
    tokenizer, encoder = load_pretrained(directory)
    assert tokenizer.prompt == reference["prompt"] == "query: "
    for prompt, key in [("document", "document"), ("passage: ", "document"), ("query", "query")]:
        tokenizer, encoder = load_pretrained(directory, prompt=prompt)
        np.testing.assert_allclose(encoder(tokenizer(sentences)).numpy(), reference["prompt_vectors"][key],
                                   rtol=0, atol=1e-5)
    tokenizer, _ = load_pretrained(directory, prompt="")
    plain = tokenizer.tokenize(sentences).to_list()
    assert not tokenizer.prompt and plain != reference["token_ids"]
    assert [ids[0] for ids in plain] == [ids[0] for ids in reference["token_ids"]]


def test_an_export_applies_a_chosen_prompt_inside(tmp_path):
    from tf_msemb.export.saved_model import export_saved_model

    reference = load_reference("xlm_roberta_tokenizer_json")
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, "xlm_roberta_tokenizer_json"), prompt="document")
    model = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path / "passages")))
    expected = np.array(reference["prompt_vectors"]["document"], np.float32)
    np.testing.assert_allclose(model(tf.constant(reference["sentences"])).numpy(), expected, rtol=0, atol=1e-5)
    with open(tmp_path / "passages" / "tf_msemb_export.json", encoding="utf-8") as f:
        assert json.load(f)["tokenizer"]["config"]["prompt"] == "passage: "


def test_the_prompt_changes_the_tokenizer_fingerprint():
    directory = os.path.join(FIXTURES, "xlm_roberta_tokenizer_json")
    prints = {load_pretrained(directory, prompt=p)[0].fingerprint() for p in ("", "query", "document")}
    assert len(prints) == 3


def test_a_pooling_that_leaves_the_prompt_out_is_refused_while_a_prompt_is_set(tmp_path):
    directory = _copy(tmp_path, "xlm_roberta_tokenizer_json")
    _edit(directory / "1_Pooling" / "config.json", include_prompt=False)
    with pytest.raises(ValueError, match=r"1_Pooling/config.json sets include_prompt false"):
        load_pretrained(str(directory))
    assert load_pretrained(str(directory), prompt="")[0].prompt == ""


@pytest.mark.parametrize("modes, named", [(["mean", "weightedmean"], "weightedmean"), ("lasttoken", "lasttoken")])
def test_an_unsupported_pooling_mode_is_named(tmp_path, modes, named):
    directory = _copy(tmp_path, "bert_tokenizer_json")
    _edit(directory / "1_Pooling" / "config.json", pooling_mode=modes)
    with pytest.raises(ValueError, match=rf"1_Pooling/config.json asks for pooling {named}; supported"):
        load_pretrained(str(directory))


def test_an_unsupported_module_is_named(tmp_path):
    directory = _copy(tmp_path, "bert_tokenizer_json")
    modules = json.loads((directory / "modules.json").read_text())
    modules.insert(2, {"idx": 9, "name": "9", "path": "9_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (directory / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=r"modules.json lists module sentence_transformers.models.LayerNorm"):
        load_pretrained(str(directory))


def test_dense_weights_only_as_pytorch_model_bin_are_named(tmp_path):
    directory = _copy(tmp_path, "bert_tokenizer_json")
    os.rename(directory / "2_Dense" / "model.safetensors", directory / "2_Dense" / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match=r"2_Dense/model.safetensors not found .*it has pytorch_model.bin"):
        load_pretrained(str(directory))


@pytest.mark.parametrize("change, message", [
    ({"activation_function": "torch.nn.modules.activation.Softplus"}, r"activation_function \S*Softplus; supported"),
    ({"out_features": 20}, r"tensor linear.weight has shape \(24, 64\), which does not fit \(20, 64\)"),
    ({"use_residual": True}, r"sets use_residual"),
])
def test_a_dense_config_it_cannot_follow_is_named(tmp_path, change, message):
    directory = _copy(tmp_path, "bert_tokenizer_json")
    _edit(directory / "2_Dense" / "config.json", **change)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_pretrained(str(directory))


def test_a_pooling_override_that_does_not_fit_the_dense_module_is_named():
    with pytest.raises(ValueError, match=r"2_Dense/config.json has in_features 64, but the modules before it give "
                                         r"32-wide vectors"):
        load_pretrained(os.path.join(FIXTURES, "bert_tokenizer_json"), pooling="mean")
