"""Hugging Face's BERT text normalization and word splitting, in TF ops.

`bert_normalize` follows `tokenizers`' `BertNormalizer` step by step (clean
text, space out CJK ideographs, strip accents, lower-case) and
`space_punctuation` its `BertPreTokenizer` (split on whitespace, every
punctuation character a word of its own), so WordPiece sees the words the
reference sees. tensorflow-text's `FastBertTokenizer` differs on purpose-built points:
it applies NFKD and case folding (`ß` -> `ss`, `ﬁ` -> `fi`, full-width ->
ASCII) and treats control characters as word breaks, where BERT deletes them.
Unicode classes come from RE2: unassigned code points (`Cn`) are not
removed as `tokenizers` removes them.
"""

import tensorflow as tf
import tensorflow_text as tf_text

# The code point blocks BERT treats as CJK ideographs (each its own word).
_CJK = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
        r"\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")
# Unicode punctuation plus every ASCII symbol (Rust's `is_ascii_punctuation`).
_PUNCTUATION = r"[\p{P}!-/:-@\[-`{-~]"


def bert_normalize(texts, lowercase=True, strip_accents=None, split_cjk=True):
    """`BertNormalizer(clean_text=True, ...)` on a string tensor.

    `strip_accents=None` strips them exactly when lower-casing, as BERT does.
    """
    # Clean text: tab, newline and carriage return are spaces; other control,
    # format and private-use characters and U+FFFD go; any other Unicode
    # space (Z*) becomes a plain one.
    texts = tf.strings.regex_replace(texts, r"[\t\n\r]", " ")
    texts = tf.strings.regex_replace(texts, r"[\p{C}\x{FFFD}]", "")
    texts = tf.strings.regex_replace(texts, r"\p{Z}", " ")
    if split_cjk:
        texts = tf.strings.regex_replace(texts, f"([{_CJK}])", r" \1 ")
    if lowercase if strip_accents is None else strip_accents:
        texts = tf.strings.regex_replace(tf_text.normalize_utf8(texts, "NFD"), r"\p{Mn}", "")
    if lowercase:
        # Per code point, with the full mappings (İ -> i + U+0307), as Rust's
        # `char::to_lowercase`: ICU's word-final ς would differ from its σ.
        texts = tf.strings.lower(tf.strings.regex_replace(texts, "\u03a3", "\u03c3"), encoding="utf-8")
    return texts


def space_punctuation(texts):
    """Every punctuation character between spaces: `BertPreTokenizer`'s words are then the space-separated ones."""
    return tf.strings.regex_replace(texts, f"({_PUNCTUATION})", r" \1 ")
