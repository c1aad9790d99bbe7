"""The package's tokenizers rebuilt from ops LiteRT runs: TFLite builtins and tensorflow-text's TFLite kernels.

LiteRT has no ICU and no regexes, so a tokenizer's string steps cannot be
converted as they run in TensorFlow; `text.charsmap` folds them into a
SentencePiece normalization table, which tensorflow-text's
`FastSentencepieceTokenizer` runs (its op has a TFLite kernel in
tensorflow-text's registrar, and in MediaPipe's as
`TFSentencepieceTokenizeOp`):

- `SentencePieceTFLite`: the model's own table, folded, and its pieces.
- `WordPieceTFLite`: BERT's normalizer and punctuation split folded into a
  `spelling_model`, whose segmentation, detokenized, is the text WordPiece
  splits; then tensorflow-text's whitespace split and `FastWordpieceTokenizer`
  (both with TFLite kernels, none of them in MediaPipe).

The prompt becomes its token ids, put before each text's, and the special
tokens, truncation and padding are dense builtin ops.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from tf_msemb.text import charsmap
from tf_msemb.text.tokenizers import SentencePieceSegmented
from tf_msemb.text.tokenizers import WordPieceTokenizer


def prompt_ids(tokenizer):
    """The ids `tokenizer` gives its prompt, special tokens aside (what it puts before every text's ids)."""
    if not tokenizer.prompt:
        return []
    if not tokenizer.prompt[-1].isspace():
        # Without a space the prompt's last piece and the text's first could be one piece.
        raise ValueError(f"prompt {tokenizer.prompt!r} does not end in a space, so its tokens depend on the "
                         "text after it; give the prompt a trailing space.")
    ids = tokenizer.tokenize(tf.constant([""]), truncate=False)[0].numpy().tolist()
    return ids[int(tokenizer.add_bos): len(ids) - int(tokenizer.add_eos)]


class TFLiteTokenizer(tf.Module):
    """strings `[batch]` -> `{"token_ids", "padding_mask"}`, as `tokenizer(texts)` gives them, in TFLite's ops.

    Subclasses give `text_ids` (strings -> ragged ids of the texts alone);
    the prompt, special tokens, truncation and padding are shared here.
    """

    def __init__(self, tokenizer):
        super().__init__()
        if not (tokenizer.add_bos and tokenizer.add_eos):
            raise ValueError(f"{type(tokenizer).__name__} without its begin and end tokens is not rebuilt for "
                             "LiteRT.")
        self.tokenizer = tokenizer
        prompt = prompt_ids(tokenizer)
        self.prompt = tf.constant(prompt, tf.int32)
        # Room for the text's own ids, as `SubwordTokenizer.tokenize` truncates prompt and text together.
        self.text_length = tokenizer.max_length - 2 - len(prompt)
        if self.text_length < 1:
            raise ValueError(f"max_length {tokenizer.max_length} leaves no room for text after the prompt's "
                             f"{len(prompt)} tokens.")

    def text_ids(self, texts):
        raise NotImplementedError

    def __call__(self, texts):
        tokenizer = self.tokenizer
        ids = self.text_ids(texts)
        lengths = tf.minimum(tf.cast(ids.row_lengths(), tf.int32), self.text_length)
        body = ids.to_tensor(default_value=tokenizer.pad_id)[:, : self.text_length]
        batch = tf.shape(body)[0]
        body = tf.concat([tf.fill([batch, 1], tokenizer.bos_id), tf.tile(self.prompt[None], [batch, 1]),
                          body, tf.fill([batch, 1], tokenizer.pad_id)], axis=1)
        columns = tf.range(tf.shape(body)[1])[None, :]
        end = (1 + tf.size(self.prompt) + lengths)[:, None]
        token_ids = tf.where(columns == end, tf.constant(tokenizer.eos_id, tf.int32), body)
        return {"token_ids": token_ids, "padding_mask": columns <= end}


class SentencePieceTFLite(TFLiteTokenizer):
    """A `SentencePieceSegmented` tokenizer: its model with the text steps folded into the table."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.sentencepiece = tf_text.FastSentencepieceTokenizer(charsmap.folded_proto(tokenizer))

    def text_ids(self, texts):
        return tf.ragged.map_flat_values(self.tokenizer.model_ids, self.sentencepiece.tokenize(texts))


class WordPieceTFLite(TFLiteTokenizer):
    """A `WordPieceTokenizer`: spelling model (BERT's text steps), whitespace split, `FastWordpieceTokenizer`.

    A character the vocabulary never spells, and every character of a word
    longer than `max_word_characters` (counted in the spelling model's
    pieces, one a character), becomes `charsmap.UNKNOWN_CHARACTER`, which
    no token holds, so WordPiece makes the word one `[UNK]` as BERT does.
    Not rebuilt: a NUL character, which BERT deletes, makes its word `[UNK]`
    here (a table cannot hold it).
    """

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        vocabulary = tokenizer.tokens()
        characters = {c for token in vocabulary for c in token.removeprefix("##") or token}
        rules = charsmap.folded_rules(charsmap.text_steps(tokenizer, tokenizer.word_text), b"")
        model = charsmap.spelling_model(rules, characters)
        self.spelling = tf_text.FastSentencepieceTokenizer(model)
        size = int(self.spelling.vocab_size())
        self.boundary_id, self.unknown_id = size - 2, size - 1
        self.whitespace = tf_text.WhitespaceTokenizer()
        unknown = vocabulary[tokenizer.unk_id]
        self.wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=vocabulary, suffix_indicator="##", max_bytes_per_word=4 * tokenizer.max_word_characters + 4,
            token_out_type=tf.int32, unknown_token=unknown, no_pretokenization=True)

    def _spell(self, pieces, starts):
        """Flat spelling ids -> the same with unknown and over-long words' characters `UNKNOWN_CHARACTER`.

        `starts`: 1 where a piece is a word boundary, else 0.
        """
        # Every text's pieces begin with a boundary (the dummy prefix), so words count across the batch.
        words = tf.maximum(tf.cumsum(starts) - 1, 0)
        characters = tf.math.segment_sum(1 - starts, words)
        too_long = tf.gather(characters, words) > self.tokenizer.max_word_characters
        unknown = (pieces == 0) | (too_long & (starts == 0))
        return tf.where(unknown, tf.constant(self.unknown_id, pieces.dtype), pieces)

    def text_ids(self, texts):
        spelled = self.spelling.tokenize(texts)
        starts = tf.cast(spelled.flat_values == self.boundary_id, tf.int32)
        pieces = self._spell(spelled.flat_values, starts)
        # The batch's words as one text: the detokenizer's TFLite kernel writes as many strings as its output
        # had when converted (one), so a batch of texts would overrun it.
        whole = tf.RaggedTensor.from_row_splits(pieces, tf.stack([0, tf.size(pieces)]))
        words = self.whitespace.tokenize(self.spelling.detokenize(whole)).flat_values
        # Each text's word count: the boundaries among its pieces.
        boundaries = tf.concat([[0], tf.cumsum(starts)], axis=0)
        splits = tf.cast(spelled.row_splits, tf.int32)
        counts = tf.gather(boundaries, splits[1:]) - tf.gather(boundaries, splits[:-1])
        wordpieces = self.wordpiece.tokenize(words).with_row_splits_dtype(tf.int32)
        return tf.RaggedTensor.from_row_lengths(wordpieces, counts).merge_dims(1, 2)


def tflite_tokenizer(tokenizer):
    """The TFLite rebuild of `tokenizer` (a `ValueError` naming the class where there is none)."""
    if isinstance(tokenizer, SentencePieceSegmented):
        return SentencePieceTFLite(tokenizer)
    if isinstance(tokenizer, WordPieceTokenizer):
        return WordPieceTFLite(tokenizer)
    raise ValueError(f"{type(tokenizer).__name__} is not rebuilt for LiteRT (SentencePiece and WordPiece "
                     "tokenizers are; a byte-level BPE needs byte-to-character tables LiteRT has no op for).")
