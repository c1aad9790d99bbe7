"""Tokenizers from tokenizer.json alone against the reference (tools/fixtures/make_parity_fixtures.py), and their errors."""

import base64
import json
import os
import shutil

import pytest
import tensorflow as tf

from tf_msemb.models.pretrained import directory_tokenizer
from tf_msemb.models.pretrained import sentence_transformers_settings
from tf_msemb.text import tokenizer_json
from pretrained_checkpoints import FIXTURES
from pretrained_checkpoints import load_reference

OWN_FILES = ("vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model")
# Fixture -> the tokenizer class it gets from tokenizer.json alone.
CASES = {
    "bert_tokenizer_json": tokenizer_json.JsonWordPieceTokenizer,  # no known class: the file's pipeline
    "roberta_tokenizer_json": tokenizer_json.JsonByteLevelBPETokenizer,
    "xlm_roberta_tokenizer_json": tokenizer_json.JsonUnigramTokenizer,
    # These carry their own files too; without them, the class's pipeline on tokenizer.json's vocabulary.
    "bert_wordpiece_uncased": tokenizer_json.JsonWordPieceTokenizer,
    "bert_wordpiece_cased": tokenizer_json.JsonWordPieceTokenizer,
    "distilbert": tokenizer_json.JsonWordPieceTokenizer,
    "roberta": tokenizer_json.JsonByteLevelBPETokenizer,
}


def _json_only(tmp_path, name):
    """A copy of the fixture's tokenizer files, tokenizer.json the only vocabulary."""
    target = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), target)
    for file in OWN_FILES:
        if os.path.exists(target / file):
            os.remove(target / file)
    return target


def _tokenizer(directory, prompt=""):
    with open(directory / "config.json", encoding="utf-8") as f:
        model_type = json.load(f)["model_type"]
    settings = sentence_transformers_settings(str(directory))
    return directory_tokenizer(str(directory), model_type, settings, settings["max_length"], prompt=prompt)


@pytest.mark.parametrize("name", sorted(CASES))
def test_token_ids_equal_the_reference(tmp_path, name):
    reference = load_reference(name)
    tokenizer = _tokenizer(_json_only(tmp_path, name), prompt=reference.get("prompt") or "")
    assert type(tokenizer) is CASES[name]
    ids = tokenizer.tokenize(tf.constant(reference["sentences"])).to_list()
    for sentence, ours, expected in zip(reference["sentences"], ids, reference["token_ids"]):
        assert ours == expected, repr(sentence)
    assert max(map(len, ids)) == reference["max_seq_length"]
    with open(os.path.join(FIXTURES, name, "config.json"), encoding="utf-8") as f:
        assert tokenizer.vocabulary_size == json.load(f)["vocab_size"]


def test_a_file_of_no_known_class_runs_its_own_normalizer_options(tmp_path):
    """Cased with accents stripped, words over 8 characters unknown: not what BertTokenizer's defaults do."""
    tokenizer = _tokenizer(_json_only(tmp_path, "bert_tokenizer_json"))
    assert (tokenizer.lowercase, tokenizer.strip_accents, tokenizer.max_word_characters) == (False, True, 8)
    ids = tokenizer.tokenize(tf.constant(["Café naïve", "extraordinary"])).to_list()
    assert ids[1] == [tokenizer.bos_id, tokenizer.unk_id, tokenizer.eos_id]
    assert ids[0] == tokenizer.tokenize(tf.constant(["Cafe naive"])).to_list()[0]


def test_the_unigram_model_keeps_the_files_ids_and_normalization_table():
    import sentencepiece

    path = os.path.join(FIXTURES, "xlm_roberta_tokenizer_json", "tokenizer.json")
    document = tokenizer_json.read_tokenizer_json(path)
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer_json.unigram_model_proto(path))
    vocab = document["model"]["vocab"]
    assert [processor.id_to_piece(i) for i in range(processor.get_piece_size())] == [p for p, _ in vocab]
    assert [processor.is_control(i) for i in (0, 1, 2, len(vocab) - 1)] == [True] * 4
    assert processor.unk_id() == document["model"]["unk_id"] == 3
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto.FromString(tokenizer_json.unigram_model_proto(path))
    assert proto.normalizer_spec.precompiled_charsmap == base64.b64decode(
        document["normalizer"]["precompiled_charsmap"])


def test_export_config_round_trips(tmp_path):
    tokenizer = _tokenizer(_json_only(tmp_path, "roberta"), prompt="query: ")
    clone = type(tokenizer).from_config(tokenizer.get_config())
    texts = tf.constant(["A man is playing a guitar.", ""])
    assert clone.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    assert clone.fingerprint() == tokenizer.fingerprint() and tokenizer.asset_file.endswith("tokenizer.json")


def _edited(tmp_path, name, edit, tokenizer_class="TokenizersBackend"):
    directory = _json_only(tmp_path, name)
    document = json.loads((directory / "tokenizer.json").read_text())
    edit(document)
    (directory / "tokenizer.json").write_text(json.dumps(document))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps(config | {"tokenizer_class": tokenizer_class}))
    return directory


@pytest.mark.parametrize("name, edit, message", [
    ("bert_tokenizer_json", lambda d: d["model"].update(type="WordLevel"),
     r"has a WordLevel model; supported: WordPiece, BPE, Unigram"),
    ("bert_tokenizer_json", lambda d: d.update(normalizer={"type": "NFKC"}),
     r"normalizer NFKC is not reproduced for a wordpiece model"),
    ("bert_tokenizer_json", lambda d: d.update(pre_tokenizer={"type": "Whitespace"}),
     r"pre_tokenizer Whitespace is not reproduced for a wordpiece model"),
    ("roberta_tokenizer_json", lambda d: d.update(normalizer={"type": "Lowercase"}),
     r"normalizer Lowercase is not reproduced for a bpe model"),
    ("roberta_tokenizer_json", lambda d: d["model"].update(byte_fallback=True),
     r"BPE option byte_fallback is not reproduced"),
    ("xlm_roberta_tokenizer_json", lambda d: d.update(normalizer={"type": "Sequence", "normalizers": [
        d["normalizer"], {"type": "Lowercase"}]}), r"normalizer Lowercase is not reproduced for a unigram model"),
    ("xlm_roberta_tokenizer_json", lambda d: d["model"].update(byte_fallback=True),
     r"Unigram option byte_fallback is not reproduced"),
    ("xlm_roberta_tokenizer_json", lambda d: d.update(post_processor=None),
     r"post_processor None does not put one token before and one after"),
])
def test_what_it_cannot_reproduce_is_named(tmp_path, name, edit, message):
    directory = _edited(tmp_path, name, edit)
    with pytest.raises(ValueError, match=message):
        _tokenizer(directory)


def test_a_known_class_with_another_model_kind_is_named(tmp_path):
    directory = _edited(tmp_path, "roberta_tokenizer_json", lambda d: None, tokenizer_class="BertTokenizer")
    with pytest.raises(ValueError, match=r"tokenizer.json holds a bpe model, but tokenizer_class BertTokenizer"):
        _tokenizer(directory)
