"""Text normalization shared by training and serving (seed 000, Sec. 4.1).

NFKC, then every double-quote, single-quote/apostrophe, hyphen and dash code
point is collapsed to one symbol per class, and whitespace runs become one
space. Everything is a TF op so the same function runs in `tf.data` and inside
the exported SavedModel.
"""

import tensorflow as tf
import tensorflow_text as tf_text

# Code points left distinct by NFKC, grouped by the symbol they collapse to.
DOUBLE_QUOTES = "\u00ab\u00bb\u201c\u201d\u201e\u201f\u2033\u2036\u275d\u275e\u301d\u301e\u301f"
SINGLE_QUOTES = "\u0060\u00b4\u02b9\u02bb\u02bc\u02bd\u2018\u2019\u201a\u201b\u2032\u2035\u2039\u203a\u275b\u275c"
HYPHENS = "\u2010\u2011\u2043\u2212\ufe63\uff0d"
DASHES = "\u2012\u2013\u2014\u2015\u2e3a\u2e3b\ufe58\ufe31\ufe32"

# NFKC turns a double prime into two primes and an acute accent (often typed
# for an apostrophe) into space + combining acute; those sequences count too.
DOUBLE_QUOTE_SEQUENCES = ("\u2032\u2032", "\u2035\u2035")
SINGLE_QUOTE_SEQUENCES = (" \u0301",)
REPLACEMENTS = (
    ("|".join(DOUBLE_QUOTE_SEQUENCES) + f"|[{DOUBLE_QUOTES}]", '"'),
    ("|".join(SINGLE_QUOTE_SEQUENCES) + f"|[{SINGLE_QUOTES}]", "'"),
    (f"[{HYPHENS}]", "-"),
    (f"[{DASHES}]", "\u2014"),
)


# Removed outright: the soft hyphen (invisible, and inside words).
SOFT_HYPHEN = "\u00ad"
# RE2's `\s` (runs of it become one space) and what `tf.strings.strip` strips (ASCII whitespace, `\v` too):
# named so that `huggingface_steps` writes the same steps for Hugging Face tokenizers.
WHITESPACE = "\t\n\f\r "
STRIPPED = "\t\n\v\f\r "


def normalize_text(texts):
    """Normalizes a string tensor of any shape.

    Invalid UTF-8 is repaired first (bad bytes become U+FFFD) so that user
    input can never make the tokenizer fail.
    """
    texts = tf.strings.unicode_transcode(
        texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    texts = tf_text.normalize_utf8(texts, "NFKC")
    for pattern, symbol in REPLACEMENTS:
        texts = tf.strings.regex_replace(texts, pattern, symbol)
    texts = tf.strings.regex_replace(texts, SOFT_HYPHEN, "")
    texts = tf.strings.regex_replace(texts, f"[{WHITESPACE}]+", " ")
    return tf.strings.strip(texts)


def huggingface_steps():
    """`normalize_text` as Hugging Face `tokenizers` normalizers (`tokenizer.json`; Oniguruma regexes over the same
    characters), in order. Invalid UTF-8, which `normalize_text` repairs first, cannot reach a Python tokenizer."""
    def replace(pattern, content):
        return {"type": "Replace", "pattern": {"Regex": pattern}, "content": content}

    strip = f"[{STRIPPED}]+"
    return ([{"type": "NFKC"}] + [replace(pattern, symbol) for pattern, symbol in REPLACEMENTS]
            + [replace(SOFT_HYPHEN, ""), replace(f"[{WHITESPACE}]+", " "), replace(f"\\A{strip}|{strip}\\z", "")])
