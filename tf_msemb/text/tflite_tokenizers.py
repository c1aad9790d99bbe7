"""The package's tokenizers rebuilt from ops LiteRT runs: TFLite builtins and tensorflow-text's TFLite kernels.

LiteRT has no ICU and no regexes, so a tokenizer's string steps cannot be
converted as they run in TensorFlow. `SentencePieceTFLite` folds them into
the model's own normalization table (`text.charsmap`) and segments with
tensorflow-text's `FastSentencepieceTokenizer`, whose op has a TFLite kernel
(tensorflow-text's registrar, and MediaPipe's as `TFSentencepieceTokenizeOp`);
the prompt becomes its token ids, put before each text's, and the special
tokens, truncation and padding are dense builtin ops.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from tf_msemb.text.charsmap import folded_proto
from tf_msemb.text.tokenizers import SentencePieceSegmented


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


class SentencePieceTFLite(tf.Module):
    """strings `[batch]` -> `{"token_ids", "padding_mask"}`, as `tokenizer(texts)` gives them, in TFLite's ops.

    Args:
        tokenizer: a `SentencePieceSegmented` tokenizer with both special
            tokens (every SentencePiece tokenizer of this package has them).
    """

    def __init__(self, tokenizer):
        super().__init__()
        if not isinstance(tokenizer, SentencePieceSegmented):
            raise ValueError(f"{type(tokenizer).__name__} does not segment with a SentencePiece model.")
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
        self.sentencepiece = tf_text.FastSentencepieceTokenizer(folded_proto(tokenizer))

    def __call__(self, texts):
        tokenizer = self.tokenizer
        ids = tf.ragged.map_flat_values(tokenizer.model_ids, self.sentencepiece.tokenize(texts))
        lengths = tf.minimum(tf.cast(ids.row_lengths(), tf.int32), self.text_length)
        body = ids.to_tensor(default_value=tokenizer.pad_id)[:, : self.text_length]
        batch = tf.shape(body)[0]
        body = tf.concat([tf.fill([batch, 1], tokenizer.bos_id), tf.tile(self.prompt[None], [batch, 1]),
                          body, tf.fill([batch, 1], tokenizer.pad_id)], axis=1)
        columns = tf.range(tf.shape(body)[1])[None, :]
        end = (1 + tf.size(self.prompt) + lengths)[:, None]
        token_ids = tf.where(columns == end, tf.constant(tokenizer.eos_id, tf.int32), body)
        return {"token_ids": token_ids, "padding_mask": columns <= end}
