"""text.tflite_tokenizers: the package's tokenizers rebuilt from ops LiteRT runs give the same ids (in TF here;
through the interpreter in tests/export/test_litert.py)."""

import json
import os

import pytest
import tensorflow as tf

from pretrained_checkpoints import FIXTURES
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.text import charsmap
from tf_msemb.text.tflite_tokenizers import WordPieceTFLite
from tf_msemb.text.tflite_tokenizers import tflite_tokenizer

with open(os.path.join(FIXTURES, "xlm_roberta_reference.json"), encoding="utf-8") as f:
    PARITY = json.load(f)["sentences"]
# Where a WordPiece rebuild goes wrong: ß, ligature and full-width (tensorflow-text's BERT normalizer folds them),
# control and zero-width characters (deleted), a character no token holds inside a word (one [UNK] for the word,
# not three words), the boundary sign SentencePiece uses, Greek capitals, words of 8 and 9 characters with more
# bytes than characters, a decomposed accent, CJK next to Latin.
WORDPIECE = ["Straße ﬁne ＡＢＣ１２３", "a\u0007b\tc\u200bd\u00ade", "ab\u2603cd ok", "hello\u2581world",
             "ΣΟΦΟΣ İstanbul", "Großteil größere Übergrößen", "cafe\u0301 crème", "東京tower", "  ", ""]


def _ids(tokenizer, texts):
    return tokenizer(tf.constant(texts))["token_ids"].numpy().tolist()


@pytest.mark.parametrize("name", ["bert_wordpiece_uncased", "bert_wordpiece_cased", "bert_tokenizer_json",
                                  "distilbert"])
def test_a_wordpiece_rebuild_gives_the_tokenizer_s_ids(name):
    tokenizer, _ = load_pretrained(os.path.join(FIXTURES, name))
    rebuilt, texts = WordPieceTFLite(tokenizer), PARITY + WORDPIECE
    assert _ids(rebuilt, texts) == _ids(tokenizer, texts)
    # One at a time too: words are counted across the batch.
    assert [_ids(rebuilt, [t])[0] for t in WORDPIECE] == [_ids(tokenizer, [t])[0] for t in WORDPIECE]


def test_over_long_words_are_counted_in_characters_not_bytes():
    tokenizer, _ = load_pretrained(os.path.join(FIXTURES, "bert_tokenizer_json"))
    assert tokenizer.max_word_characters == 8
    # 8 characters, 9 bytes (kept) and 9 characters (one [UNK]).
    ids = _ids(WordPieceTFLite(tokenizer), ["Großteil", "Großteile"])
    assert ids == _ids(tokenizer, ["Großteil", "Großteile"])
    assert tokenizer.unk_id not in ids[0]
    assert ids[1][:3] == [tokenizer.bos_id, tokenizer.unk_id, tokenizer.eos_id]


def test_the_spelling_model_ends_with_the_boundary_and_the_unknown_character():
    model = charsmap.spelling_model([("A", "a")], "ab")
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    assert [p.piece for p in proto.pieces] == ["<unk>", "a", "b", charsmap.WORD_BOUNDARY, charsmap.UNKNOWN_CHARACTER]
    assert dict(charsmap.table_rules(proto.normalizer_spec.precompiled_charsmap)) == {
        "A": "a", charsmap.WORD_BOUNDARY: charsmap.UNKNOWN_CHARACTER}


def test_a_byte_level_bpe_tokenizer_is_refused_by_name():
    tokenizer, _ = load_pretrained(os.path.join(FIXTURES, "roberta"))
    with pytest.raises(ValueError, match=f"{type(tokenizer).__name__} is not rebuilt for LiteRT"):
        tflite_tokenizer(tokenizer)
