"""Subword tokenizer layers that run in-graph (tf.data, train_step, SavedModel).

Every tokenizer maps a 1-D string tensor to
`{"token_ids": int32 [batch, length], "padding_mask": bool [batch, length]}`,
padded to the longest sequence in the batch (at least one column, so an empty
batch still has a well-defined shape). Subclasses only implement
`_tokenize_normalized` and say which ids are special, so SentencePiece
(our multilingual vocabularies) and WordPiece (BERT teachers) plug in alike.
"""

import hashlib
import json
import os

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from tf_msemb.text import vocabulary
from tf_msemb.text.bert_text import bert_normalize
from tf_msemb.text.bert_text import space_punctuation
from tf_msemb.text.normalize import normalize_text


# The options that change token ids (those a tokenizer has go into its fingerprint).
FINGERPRINT_OPTIONS = ("add_bos", "add_eos", "normalize", "lowercase", "strip_accents", "split_cjk",
                       "max_word_characters", "prompt")


class SubwordTokenizer(keras.layers.Layer):
    """Shared truncation, special tokens and padding.

    Args:
        max_length: longest sequence returned, special tokens included.
        add_bos: prepend the begin-of-sequence token.
        add_eos: append the end-of-sequence token.
        normalize: apply `normalize_text` before tokenizing.
        prompt: text put before every input, inside the graph (a
            sentence-transformers prompt such as `"query: "`), so exports
            given raw strings apply it too.
        prompts: the model's named prompts (sentence-transformers'
            `prompts`, e.g. `{"query": "query: ", "document": "passage: "}`),
            which a caller puts before texts by task (MTEB does); recorded
            in exports, never applied here.
        default_prompt_name: the one of `prompts` sentence-transformers
            applies when a call names none (recorded, never applied here).
    """

    def __init__(self, max_length=128, add_bos=True, add_eos=True, normalize=True, prompt="", prompts=None,
                 default_prompt_name=None, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)
        if max_length < 1 + int(add_bos) + int(add_eos):
            raise ValueError(
                f"max_length={max_length} leaves no room for text after the special tokens."
            )
        self.max_length = max_length
        self.add_bos = add_bos
        self.add_eos = add_eos
        self.normalize = normalize
        self.prompt = prompt or ""
        self.prompts = dict(prompts or {})
        self.default_prompt_name = default_prompt_name

    @property
    def vocabulary_size(self):
        raise NotImplementedError

    @property
    def asset_file(self):
        """The file that defines the vocabulary (copied into exports), or None."""
        return None

    def _tokenize_normalized(self, texts):
        """1-D string tensor -> int32 RaggedTensor [batch, (tokens)]."""
        raise NotImplementedError

    def tokenize(self, texts, truncate=True):
        """Returns ragged ids with special tokens; never an empty row.

        With `truncate=False` the full length is kept, which is what a length
        filter needs to see.
        """
        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        if self.prompt:
            texts = tf.strings.join([self.prompt, texts])
        if self.normalize:
            texts = normalize_text(texts)
        ids = self._tokenize_normalized(texts)
        if truncate:
            ids = ids[:, : self.max_length - int(self.add_bos) - int(self.add_eos)]
        batch = ids.nrows()
        parts = []
        if self.add_bos:
            parts.append(tf.fill([batch, 1], tf.constant(self.bos_id, tf.int32)))
        parts.append(ids)
        if self.add_eos:
            parts.append(tf.fill([batch, 1], tf.constant(self.eos_id, tf.int32)))
        if len(parts) == 1:
            # Without special tokens an empty text still needs one token, or
            # pooling would average nothing: it becomes a single <unk>.
            lengths = ids.row_lengths()
            unk = tf.fill([batch, 1], tf.constant(self.unk_id, tf.int32))
            padded = tf.concat([ids, unk], axis=1)
            keep = tf.ragged.range(lengths + 1) < tf.maximum(lengths, 1)[:, None]
            return tf.ragged.boolean_mask(padded, keep)
        return tf.concat(parts, axis=1)

    @property
    def special_ids(self):
        """The ids of padding, unknown, begin and end tokens."""
        return tuple(sorted({self.pad_id, self.unk_id, self.bos_id, self.eos_id}))

    @property
    def control_ids(self):
        """The ids of padding, begin and end tokens: `special_ids` but `<unk>`, which stands for text."""
        return tuple(sorted({self.pad_id, self.bos_id, self.eos_id}))

    def pad(self, ids):
        """Ragged ids -> dense ids and mask, at least one column wide."""
        token_ids = ids.to_tensor(default_value=self.pad_id)
        # Only an empty batch has zero columns; give it one so shapes stay valid.
        extra = tf.maximum(1 - tf.shape(token_ids)[1], 0)
        token_ids = tf.pad(token_ids, [[0, 0], [0, extra]], constant_values=self.pad_id)
        mask = tf.sequence_mask(ids.row_lengths(), maxlen=tf.shape(token_ids)[1])
        return {"token_ids": token_ids, "padding_mask": mask}

    def call(self, texts):
        return self.pad(self.tokenize(texts))

    def fingerprint(self):
        """Identifies the exact tokenization (class, options, vocabulary bytes), for records that store token ids."""
        digest = hashlib.sha256(type(self).__name__.encode())
        options = {k: v for k, v in self.get_config().items() if k in FINGERPRINT_OPTIONS}
        digest.update(json.dumps(options, sort_keys=True).encode())
        if self.asset_file:
            with open(self.asset_file, "rb") as f:
                digest.update(f.read())
        else:
            digest.update(json.dumps(self.get_config(), sort_keys=True, default=str).encode())
        return digest.hexdigest()[:16]

    def get_config(self):
        config = super().get_config()
        config.update(
            max_length=self.max_length,
            add_bos=self.add_bos,
            add_eos=self.add_eos,
            normalize=self.normalize,
        )
        if self.prompt:
            config["prompt"] = self.prompt
        if self.prompts:
            config["prompts"] = dict(self.prompts)
        if self.default_prompt_name:
            config["default_prompt_name"] = self.default_prompt_name
        return config


def _read_bytes(path, what):
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{what} not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


class SentencePieceSegmented:
    """A tokenizer that segments with a SentencePiece model (`proto`, a serialized `ModelProto`).

    Between `SubwordTokenizer`'s shared steps (prompt, `normalize_text`) and
    the special tokens it runs `sentencepiece_text` (strings -> the strings
    the model segments), the model, and `model_ids` (the model's ids -> this
    tokenizer's); a runtime without TF's string ops (`export.litert`)
    rebuilds the same three.
    """

    def _sentencepiece(self):
        # Built per trace rather than once: the op's resource then lives with
        # the graph that uses it (tf.data, tf.function, SavedModel) and is not
        # lost when e.g. `tf.random.set_seed` clears the eager context.
        return tf_text.SentencepieceTokenizer(model=self.proto, out_type=tf.int32)

    def sentencepiece_text(self, texts):
        return texts

    def model_ids(self, ids):
        return ids

    def _tokenize_normalized(self, texts):
        ids = self._sentencepiece().tokenize(self.sentencepiece_text(texts))
        return tf.ragged.map_flat_values(self.model_ids, ids)


class SentencePieceTokenizer(SentencePieceSegmented, SubwordTokenizer):
    """SentencePiece model (as written by `tools/train_spm.py`).

    Args:
        model_file: path of the `.model` file; its bytes are embedded in the
            graph, so exports carry the tokenizer with them.
        lowercase: lower-case the text (UTF-8 aware, in-graph, after
            `normalize`), for a model trained on lower-cased text as seed
            003's (Sec. IV-B).
    """

    def __init__(self, model_file, max_length=128, add_bos=True, add_eos=True, normalize=True, lowercase=False,
                 **kwargs):
        super().__init__(max_length=max_length, add_bos=add_bos, add_eos=add_eos, normalize=normalize, **kwargs)
        self.model_file = os.fspath(model_file)
        self.lowercase = lowercase
        self.proto = _read_bytes(self.model_file, "SentencePiece model")
        sp = self._sentencepiece()
        self._vocabulary_size = int(sp.vocab_size())
        self._piece_ids = {}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (
            self.token_to_id(piece) for piece in (vocabulary.PAD, vocabulary.BOS, vocabulary.EOS, vocabulary.UNK)
        )

    @property
    def vocabulary_size(self):
        return self._vocabulary_size

    def token_to_id(self, piece):
        """Id of a piece, or the unknown id when the vocabulary lacks it."""
        if piece not in self._piece_ids:
            self._piece_ids[piece] = int(self._sentencepiece().string_to_id(piece))
        return self._piece_ids[piece]

    def sentencepiece_text(self, texts):
        return tf.strings.lower(texts, encoding="utf-8") if self.lowercase else texts

    def get_config(self):
        config = super().get_config()
        config.update(model_file=self.model_file, lowercase=self.lowercase)
        return config

    @property
    def asset_file(self):
        return self.model_file


class WordPieceTokenizer(SubwordTokenizer):
    """BERT WordPiece vocabulary (`vocab.txt`), `[CLS]`/`[SEP]` as BOS/EOS, token ids as Hugging Face's.

    The text goes through `bert_text` (BERT's normalizer and word splitting
    as the `tokenizers` library runs them), then greedy longest-match
    WordPiece; a word of more than `max_word_characters` characters, or one
    the vocabulary cannot spell, becomes `[UNK]`.

    Args:
        vocabulary_file: one token per line, id = line number.
        lowercase: lower-case the text, as uncased BERT does.
        strip_accents: drop combining marks after NFD; None: exactly when
            `lowercase` (BERT's default).
        split_cjk: make every CJK ideograph a word of its own.
        max_word_characters: longer words become `[UNK]`.
    """

    def __init__(
        self,
        vocabulary_file,
        lowercase=True,
        max_length=128,
        add_bos=True,
        add_eos=True,
        normalize=False,
        strip_accents=None,
        split_cjk=True,
        max_word_characters=100,
        **kwargs,
    ):
        super().__init__(max_length=max_length, add_bos=add_bos, add_eos=add_eos, normalize=normalize, **kwargs)
        self.vocabulary_file = os.fspath(vocabulary_file)
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.split_cjk = split_cjk
        self.max_word_characters = max_word_characters
        vocab = self.tokens()
        index = {token: i for i, token in enumerate(vocab)}
        pad, unk, cls, sep = self._special_tokens()
        missing = [t for t in (pad, unk, cls, sep) if t not in index]
        if missing:
            raise ValueError(f"{self.vocabulary_file} lacks the special tokens {missing}.")
        self.pad_id, self.unk_id = index[pad], index[unk]
        self.bos_id, self.eos_id = index[cls], index[sep]
        self._vocabulary_size = len(vocab)
        # Words are at most 4 bytes a character; longer ones are handled in `_tokenize_normalized`.
        self._wp = tf_text.FastWordpieceTokenizer(
            vocab=vocab, suffix_indicator="##", max_bytes_per_word=4 * max_word_characters + 4,
            token_out_type=tf.int32, unknown_token=unk, no_pretokenization=True)

    def tokens(self):
        """The tokens in id order (here: the lines of `vocabulary_file`)."""
        return _read_bytes(self.vocabulary_file, "WordPiece vocabulary").decode("utf-8").splitlines()

    def _special_tokens(self):
        """Padding, unknown, begin and end tokens."""
        return "[PAD]", "[UNK]", "[CLS]", "[SEP]"

    @property
    def vocabulary_size(self):
        return self._vocabulary_size

    def word_text(self, texts):
        """strings -> BERT's normalized text with its words between single spaces (what WordPiece splits)."""
        texts = bert_normalize(texts, lowercase=self.lowercase, strip_accents=self.strip_accents,
                               split_cjk=self.split_cjk)
        return space_punctuation(texts)

    def _tokenize_normalized(self, texts):
        words = tf.strings.split(self.word_text(texts), sep=None)
        pieces = self._wp.tokenize(words.flat_values)
        # A word longer than the limit is one [UNK] (counted in characters, as BERT does).
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > self.max_word_characters
        lengths = tf.where(too_long, tf.ones_like(pieces.row_lengths()), pieces.row_lengths())
        kept = tf.ragged.boolean_mask(pieces, tf.ragged.range(pieces.row_lengths()) < lengths[:, None])
        values = tf.where(tf.repeat(too_long, lengths), tf.constant(self.unk_id, tf.int32), kept.flat_values)
        return words.with_flat_values(tf.RaggedTensor.from_row_lengths(values, lengths)).merge_dims(1, 2)

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_file=self.vocabulary_file, lowercase=self.lowercase,
                      strip_accents=self.strip_accents, split_cjk=self.split_cjk,
                      max_word_characters=self.max_word_characters)
        return config

    @property
    def asset_file(self):
        return self.vocabulary_file


class KerasHubTokenizer(SubwordTokenizer):
    """Any keras-hub tokenizer preset (e.g. XLM-R's SentencePiece with its id offsets).

    Args:
        preset: a keras-hub preset name, or a local directory keras-hub can load.
    """

    def __init__(self, preset, max_length=128, add_bos=True, add_eos=True, normalize=False, **kwargs):
        import keras_hub

        super().__init__(max_length=max_length, add_bos=add_bos, add_eos=add_eos, normalize=normalize, **kwargs)
        self.preset = os.fspath(preset)
        self.hub_tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(self.preset)
        self.bos_id = self.hub_tokenizer.start_token_id
        self.eos_id = self.hub_tokenizer.end_token_id
        self.pad_id = self.hub_tokenizer.pad_token_id
        vocabulary = set(self.hub_tokenizer.get_vocabulary())
        unknown = next((t for t in ("[UNK]", "<unk>") if t in vocabulary), None)
        self.unk_id = self.hub_tokenizer.token_to_id(unknown) if unknown else self.pad_id
        self._vocabulary_size = self.hub_tokenizer.vocabulary_size()

    def build(self, input_shape=None):
        """keras-hub's tokenizer holds no weights: it is built with this layer."""
        self.hub_tokenizer.build(input_shape)
        super().build(input_shape)

    @property
    def vocabulary_size(self):
        return self._vocabulary_size

    def _tokenize_normalized(self, texts):
        ids = self.hub_tokenizer.tokenize(texts)
        if isinstance(ids, list):
            # Eagerly, keras-hub hands ragged results back as Python lists.
            ids = tf.ragged.constant(ids, dtype=tf.int32, ragged_rank=1)
        return tf.cast(ids, tf.int32)

    def get_config(self):
        config = super().get_config()
        config["preset"] = self.preset
        return config
