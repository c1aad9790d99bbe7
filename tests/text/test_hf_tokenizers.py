"""Token ids of the Hugging Face tokenizer families against the reference (tools/make_parity_fixtures.py)."""

import json
import os

import pytest
import tensorflow as tf

from tf_msemb.text.bert_text import bert_normalize
from tf_msemb.text.hf_tokenizers import ByteLevelBPETokenizer
from tf_msemb.text.hf_tokenizers import FairseqSentencePieceTokenizer
from tf_msemb.text.hf_tokenizers import gpt2_words
from tf_msemb.text.tokenizers import WordPieceTokenizer
from pretrained_checkpoints import FIXTURES
from pretrained_checkpoints import load_reference


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
