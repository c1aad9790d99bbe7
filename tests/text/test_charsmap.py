"""text.charsmap: a tokenizer's text steps folded into its SentencePiece model's table."""

import json
import os

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from pretrained_checkpoints import FIXTURES
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.text import charsmap
from tf_msemb.text.normalize import normalize_text
from tf_msemb.text.tokenizers import SentencePieceTokenizer

# The parity sentences of tests/models/test_hf_checkpoints.py: accents, full-width, ligatures, quotes, controls,
# Unicode spaces (U+0085, U+2029, U+3000), Greek final sigma, mixed scripts, a 120-character word.
with open(os.path.join(FIXTURES, "xlm_roberta_reference.json"), encoding="utf-8") as f:
    PARITY = json.load(f)["sentences"]
# Texts where a step acts on a sequence: a double prime, a spaced acute accent, a decomposed é, whitespace runs.
SEQUENCES = ["it\u2032\u2032s", "don \u0301t", "cafe\u0301 au lait", "a \t\n  b\u3000\u3000c", "\u00adsoft"]


def _ids(tokenizer, proto, texts):
    """The tokenizer's ids from tensorflow-text's FastSentencepieceTokenizer over `proto`, specials aside."""
    ids = tf_text.FastSentencepieceTokenizer(proto).tokenize(tf.constant(texts))
    return tf.ragged.map_flat_values(tokenizer.model_ids, ids).to_list()


def _reference(tokenizer, texts):
    return [row[1:-1] for row in tokenizer.tokenize(tf.constant(texts), truncate=False).to_list()]


@pytest.mark.parametrize("lowercase", [False, True])
def test_a_from_scratch_model_s_folded_table_runs_normalize_text(spm_model, lowercase):
    tokenizer = SentencePieceTokenizer(spm_model, max_length=512, lowercase=lowercase)
    texts = PARITY + SEQUENCES
    assert _ids(tokenizer, charsmap.folded_proto(tokenizer), texts) == _reference(tokenizer, texts)
    # The model's own table (identity: normalize_text ran before it) differs on these texts: the test can fail.
    unfolded = _ids(tokenizer, tokenizer.proto, texts)
    assert sum(a != b for a, b in zip(unfolded, _reference(tokenizer, texts))) >= 8


@pytest.mark.parametrize("name", ["xlm_roberta", "xlm_roberta_tokenizer_json"])
def test_an_xlm_r_table_keeps_its_nfkc_and_takes_the_unicode_spaces(name):
    tokenizer, _ = load_pretrained(os.path.join(FIXTURES, name), prompt="")
    assert _ids(tokenizer, charsmap.folded_proto(tokenizer), PARITY) == _reference(tokenizer, PARITY)
    # Without the fold U+0085 and U+2029 are no word breaks (XLM-R's table keeps them).
    unfolded = _ids(tokenizer, tokenizer.proto, PARITY)
    assert unfolded != _reference(tokenizer, PARITY)


def test_folded_rules_by_hand():
    rules = dict(charsmap.folded_rules(normalize_text, b""))
    assert rules["\ufb01"] == "fi" and rules["\uff28"] == "H"  # NFKC
    assert rules["\u2019"] == "'" and rules["\u201e"] == '"' and rules["\u2013"] == "\u2014"
    assert rules["\u00ad"] == "" and rules["\t"] == " " and rules["\u3000"] == " "
    assert rules["\u2032\u2032"] == '"' and rules[" \u0301"] == "'" and rules["e\u0301"] == "\u00e9"
    assert "a" not in rules and "\u00e9" not in rules  # nothing for what the steps keep
    assert "ab" not in rules  # no rule for a sequence whose characters' rules already give its value


def test_rules_compile_and_decompile_unchanged():
    rules = [("\u00e9", "e"), ("ab", ""), ("\u3000", " ")]
    assert sorted(charsmap.table_rules(charsmap.compile_rules(rules))) == sorted(rules)
