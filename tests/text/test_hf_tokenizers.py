"""Token ids of the Hugging Face tokenizer families against the reference (tools/fixtures/make_parity_fixtures.py)."""

import json
import os

import pytest
import tensorflow as tf
import tokenizers

from tf_msemb.models.pretrained import directory_tokenizer
from tf_msemb.models.pretrained import sentence_transformers_settings
from tf_msemb.text.bert_text import bert_normalize
from tf_msemb.text.hf_tokenizers import ByteLevelBPETokenizer
from tf_msemb.text.hf_tokenizers import FairseqSentencePieceTokenizer
from tf_msemb.text.hf_tokenizers import gpt2_words
from tf_msemb.text.tokenizer_json import JsonUnigramTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer
from pretrained_checkpoints import FIXTURES
from pretrained_checkpoints import load_reference
from pretrained_checkpoints import xlm_roberta_unknown_at_three


def _tokenizer(name, max_length):
    directory = os.path.join(FIXTURES, name)
    if name in ("bert_wordpiece_uncased", "bert_wordpiece_cased", "distilbert"):
        return WordPieceTokenizer(os.path.join(directory, "vocab.txt"), lowercase=name != "bert_wordpiece_cased",
                                  max_length=max_length)
    if name == "roberta":
        return ByteLevelBPETokenizer(os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt"),
                                     max_length=max_length)
    return FairseqSentencePieceTokenizer(os.path.join(directory, "sentencepiece.bpe.model"), max_length=max_length)


@pytest.mark.parametrize("name", ["bert_wordpiece_uncased", "bert_wordpiece_cased", "distilbert", "bert_sentencepiece",
                                  "xlm_roberta", "roberta"])
def test_token_ids_equal_the_reference(name):
    reference = load_reference(name)
    tokenizer = _tokenizer(name, reference["max_seq_length"])
    ids = tokenizer.tokenize(tf.constant(reference["sentences"])).to_list()
    for sentence, ours, expected in zip(reference["sentences"], ids, reference["token_ids"]):
        assert ours == expected, repr(sentence)
    # The fixture exercises truncation and the empty string.
    assert max(map(len, ids)) == reference["max_seq_length"] and [tokenizer.bos_id, tokenizer.eos_id] in ids


def test_vocabulary_sizes_match_the_checkpoints():
    for name in ("bert_sentencepiece", "xlm_roberta", "roberta", "bert_wordpiece_cased"):
        with open(os.path.join(FIXTURES, name, "config.json"), encoding="utf-8") as f:
            assert _tokenizer(name, 32).vocabulary_size == json.load(f)["vocab_size"], name


def test_fairseq_ids_are_offset_by_one_with_unknown_at_three():
    tokenizer = _tokenizer("xlm_roberta", 32)
    sp = tokenizer._sentencepiece()
    ids = tokenizer.tokenize(tf.constant(["the ᚠ"])).to_list()[0]
    pieces = sp.tokenize(tf.constant(["the ᚠ"])).to_list()[0]
    assert ids == [0] + [3 if p == 0 else p + 1 for p in pieces] + [2] and 3 in ids
    assert (tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert tokenizer.mask_id == tokenizer.vocabulary_size - 1


def test_bert_normalization_is_huggingfaces_not_nfkd_casefold():
    out = bert_normalize(tf.constant(["Straße \ufb01 ＡＢ ΟΔΟΣ a\u0007b\u200bc\td 東京 Café"]), lowercase=True)
    assert out.numpy()[0].decode() == "straße \ufb01 ａｂ οδοσ abc d  東  京  cafe"
    cased = bert_normalize(tf.constant(["Café İ"]), lowercase=False)
    assert cased.numpy()[0].decode() == "Café İ"


def test_gpt2_words_treat_unicode_spaces_as_the_reference_regex():
    words = gpt2_words(tf.constant(["a  b\u2029c it's  ", "x\u3000 y"])).to_list()
    assert [[w.decode() for w in row] for row in words] == [
        ["a", " ", " b", "\u2029", "c", " it", "'s", "  "], ["x", "\u3000", " y"]]


# Letters the model never saw (Æ, ø, the ž of ǅ's NFKC form): where the unknown id shows.
UNSEEN_LETTERS = ["Ærøskøbing ñandú ǅ", "smørrebrød på Ærø"]


def _reference_ids(tokenizer_file, texts):
    """The ids of `tokenizers` running `tokenizer_file`, as transformers' fast tokenizer (its default) does."""
    return [encoding.ids for encoding in tokenizers.Tokenizer.from_file(str(tokenizer_file)).encode_batch(texts)]


def _checkpoint_tokenizer(directory):
    settings = sentence_transformers_settings(str(directory))
    return directory_tokenizer(str(directory), "xlm-roberta", settings, 512)


@pytest.mark.parametrize("removed, make", [
    (None, lambda directory: FairseqSentencePieceTokenizer(directory / "sentencepiece.bpe.model", max_length=512)),
    (None, _checkpoint_tokenizer),
    ("sentencepiece.bpe.model", lambda directory: JsonUnigramTokenizer(directory / "tokenizer.json", max_length=512)),
    ("tokenizer.json", lambda directory: FairseqSentencePieceTokenizer(directory / "sentencepiece.bpe.model",
                                                                       max_length=512)),
], ids=["model_beside_tokenizer_json", "checkpoint_directory", "tokenizer_json_alone", "model_alone"])
def test_a_model_trained_with_unknown_at_three_gets_tokenizer_json_s_ids(tmp_path, removed, make):
    """The model's unknown piece (its id 3) is tokenizer.json's `<unk>`, 3, not 3 + fairseq's offset."""
    directory = tmp_path / "checkpoint"
    xlm_roberta_unknown_at_three(directory)
    texts = load_reference("xlm_roberta")["sentences"] + UNSEEN_LETTERS
    expected = _reference_ids(directory / "tokenizer.json", texts)
    assert all(3 in ids for ids in expected[-len(UNSEEN_LETTERS):])
    size = len(json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])
    if removed:
        os.remove(directory / removed)
    tokenizer = make(directory)
    ids = tokenizer.tokenize(tf.constant(texts)).to_list()
    for sentence, ours, reference in zip(texts, ids, expected):
        assert ours == reference, repr(sentence)
    assert (tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert tokenizer.vocabulary_size == size


def test_a_model_beside_tokenizer_json_takes_the_files_ids_whatever_their_order(tmp_path):
    """tokenizer.json's vocabulary decides the ids even where they are not fairseq's layout."""
    directory = tmp_path / "checkpoint"
    xlm_roberta_unknown_at_three(directory)
    before = FairseqSentencePieceTokenizer(directory / "sentencepiece.bpe.model").fingerprint()
    document = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = document["model"]["vocab"]
    document["model"]["vocab"] = vocab[:4] + vocab[4:-1][::-1] + vocab[-1:]
    (directory / "tokenizer.json").write_text(json.dumps(document), encoding="utf-8")
    texts = load_reference("xlm_roberta")["sentences"] + UNSEEN_LETTERS
    tokenizer = FairseqSentencePieceTokenizer(directory / "sentencepiece.bpe.model", max_length=512)
    assert tokenizer.tokenize(tf.constant(texts)).to_list() == _reference_ids(directory / "tokenizer.json", texts)
    assert tokenizer.fingerprint() != before
