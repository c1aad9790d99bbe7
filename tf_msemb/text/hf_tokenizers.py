"""The other tokenizers of Hugging Face checkpoints, in-graph, with Hugging Face's token ids.

- `FairseqSentencePieceTokenizer`: XLM-R's `sentencepiece.bpe.model` (also
  used by BERT-architecture models such as multilingual MiniLM and
  multilingual-e5), with the ids of a `tokenizer.json` beside it, else
  fairseq's id layout.
- `ByteLevelBPETokenizer`: RoBERTa's (and GPT-2's) byte-level BPE,
  `vocab.json` + `merges.txt`, on keras-hub's `BytePairTokenizer`.

(BERT's WordPiece is `tokenizers.WordPieceTokenizer`.)
"""

import hashlib
import json
import os

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from tf_msemb.text.tokenizers import SentencePieceSegmented
from tf_msemb.text.tokenizers import SubwordTokenizer
from tf_msemb.text.tokenizers import _read_bytes

# fairseq's dictionary puts these four first; XLM-R's SentencePiece model has <unk>, <s>, </s> as its ids 0-2.
FAIRSEQ_BOS, FAIRSEQ_PAD, FAIRSEQ_EOS, FAIRSEQ_UNK = 0, 1, 2, 3


def spaces_to_blanks(texts):
    """Every Unicode space (and tab, newline, U+0085) as a plain space: a word break, as the reference's split."""
    return tf.strings.regex_replace(texts, r"[\t\n\r\x{85}\p{Z}]", " ")


def tokenizer_json_ids(path, document=None):
    """(token -> id, unknown id, vocabulary size) of a `tokenizer.json` Unigram model, as `tokenizers` resolves them.

    A token's id is its position in the model's vocabulary (the last one
    where a name repeats, e.g. `<unk>` both as the special token and as a
    piece copied from SentencePiece), else its id among `added_tokens`:
    `tokenizers` gives an added token the model's id where the model has it.
    Text the model cannot spell becomes `unk_id`.
    """
    document = document or json.loads(_read_bytes(path, "tokenizer.json"))
    model = document.get("model") or {}
    if model.get("type") != "Unigram" or model.get("unk_id") is None:
        raise ValueError(f"{path} holds no Unigram model with an unk_id, as XLM-R's tokenizer.json does.")
    added = {token["content"]: token["id"] for token in document.get("added_tokens", [])}
    ids = added | {piece: i for i, (piece, _) in enumerate(model["vocab"])}
    return ids, model["unk_id"], max([len(model["vocab"]), *(i + 1 for i in added.values())])


class FairseqSentencePieceTokenizer(SentencePieceSegmented, SubwordTokenizer):
    """SentencePiece pieces with the ids of transformers' XLM-R tokenizer, as `AutoTokenizer` loads it.

    `AutoTokenizer` loads the fast tokenizer, which reads `tokenizer.json`
    where the checkpoint has one (the SentencePiece model beside it unused)
    and otherwise converts the SentencePiece model. Here the model segments
    the text and the ids are the fast tokenizer's:

    - with a `tokenizer.json` beside `model_file`, that file's ids
      (`tokenizer_json_ids`): each piece by name, SentencePiece's unknown
      piece as the file's `unk_id`, `<s>`, `<pad>`, `</s>`, `<mask>` by name;
    - without one, the layout transformers' converter writes, fairseq's:
      `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, piece i -> i + 1, `<mask>`
      last. SentencePiece's unknown piece becomes 3 wherever the model has
      it (XLM-R's model: id 0; one trained with `bos_id=0, pad_id=1,
      eos_id=2, unk_id=3`: id 3, where i + 1 would be 4).

    SentencePiece applies the model's own normalization (XLM-R: NMT-NFKC,
    extra spaces removed), as the reference tokenizer does with the same
    table; every Unicode space is a word break first, as in the reference's
    whitespace split (the table keeps e.g. U+0085 as an unknown character).
    Known difference: the reference normalizes whole grapheme clusters, so a
    combining mark after a character the table maps to a space (U+FFFD +
    U+0327) vanishes there and is one `<unk>` here.

    Args:
        model_file: the `.model` file; its bytes are embedded in the graph.
    """

    def __init__(self, model_file, max_length=128, add_bos=True, add_eos=True, normalize=False, **kwargs):
        super().__init__(max_length=max_length, add_bos=add_bos, add_eos=add_eos, normalize=normalize, **kwargs)
        self.model_file = os.fspath(model_file)
        self.proto = _read_bytes(self.model_file, "SentencePiece model")
        processor = sentencepiece.SentencePieceProcessor(model_proto=self.proto)
        pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        tokenizer_file = os.path.join(os.path.dirname(self.model_file), "tokenizer.json")
        self.tokenizer_file = tokenizer_file if tf.io.gfile.exists(tokenizer_file) else None
        if self.tokenizer_file:
            ids, self.unk_id, self._vocabulary_size = tokenizer_json_ids(self.tokenizer_file)
            missing = [t for t in ("<s>", "<pad>", "</s>", "<mask>") if t not in ids]
            missing += [p for i, p in enumerate(pieces) if p not in ids and i != processor.unk_id()]
            if missing:
                raise ValueError(f"{self.tokenizer_file} does not match {self.model_file}: it lacks {missing[:5]}.")
            self.bos_id, self.pad_id, self.eos_id, self._mask_id = (ids[t] for t in ("<s>", "<pad>", "</s>", "<mask>"))
            hf_ids = [ids.get(p) for p in pieces]
        else:
            self.bos_id, self.pad_id, self.eos_id, self.unk_id = FAIRSEQ_BOS, FAIRSEQ_PAD, FAIRSEQ_EOS, FAIRSEQ_UNK
            # fairseq's four specials + SentencePiece's pieces after its three + <mask>.
            self._vocabulary_size = 4 + len(pieces) - 3 + 1
            self._mask_id = self._vocabulary_size - 1
            hf_ids = [i + 1 for i in range(len(pieces))]
        hf_ids[processor.unk_id()] = self.unk_id
        self._hf_ids = tuple(hf_ids)  # SentencePiece id -> Hugging Face id

    @property
    def vocabulary_size(self):
        return self._vocabulary_size

    @property
    def mask_id(self):
        return self._mask_id

    def sentencepiece_text(self, texts):
        return spaces_to_blanks(texts)

    def model_ids(self, ids):
        return tf.gather(tf.constant(self._hf_ids, tf.int32), ids)

    def fingerprint(self):
        """The base fingerprint (the model included) and the `tokenizer.json` that gives the ids, if any."""
        digest = hashlib.sha256(super().fingerprint().encode())
        if self.tokenizer_file:
            digest.update(_read_bytes(self.tokenizer_file, "tokenizer.json"))
        return digest.hexdigest()[:16]

    def get_config(self):
        config = super().get_config()
        config["model_file"] = self.model_file
        return config

    @property
    def asset_file(self):
        return self.model_file


# Unicode's White_Space: what `\s` means in the reference's regex (RE2's `\s` is ASCII only).
_SPACE = r"[\t\n\x0b\x0c\r\x{85}\p{Z}]"


def gpt2_words(texts):
    """GPT-2's pre-tokenization (`'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`)
    with Unicode spaces, as ragged words.

    RE2 has no look-ahead, so runs of spaces are split off first: a run
    followed by text gives its last character to that text (a plain space
    joins the word, as ` ?\\p{L}+` takes it; any other space stands alone) and
    the rest of the run is one word.
    """
    runs = tf_text.regex_split(texts, _SPACE + "+", _SPACE + "+")
    flat = runs.flat_values
    is_space = tf.strings.regex_full_match(flat, _SPACE + "+")
    position = tf.ragged.range(runs.row_lengths()).flat_values
    followed = is_space & (position < tf.repeat(runs.row_lengths(), runs.row_lengths()) - 1)
    chars = tf.strings.length(flat, unit="UTF8_CHAR")
    cut = tf.maximum(chars - 1, 0)
    head = tf.strings.substr(flat, tf.zeros_like(cut), cut, unit="UTF8_CHAR")
    last = tf.strings.substr(flat, cut, tf.ones_like(cut), unit="UTF8_CHAR")
    gives_space = followed & tf.equal(last, " ")
    # The run before this one ends in a plain space that this word takes.
    takes_space = tf.concat([[False], gives_space[:-1]], axis=0)
    first = tf.where(followed, head, tf.where(takes_space, tf.strings.join([" ", flat]), flat))
    second = tf.where(followed & ~gives_space, last, "")
    pieces = runs.with_flat_values(tf.stack([first, second], axis=1)).merge_dims(1, 2)
    pieces = tf.ragged.boolean_mask(pieces, tf.strings.length(pieces) > 0)
    # The remaining alternatives need no look-ahead; RE2 tries them in order, as the reference.
    pattern = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\t\n\x0b\x0c\r\x{85}\p{Z}\p{L}\p{N}]+|"
               + _SPACE + "+")
    words = tf_text.regex_split(pieces.flat_values, pattern, pattern)
    return pieces.with_flat_values(words).merge_dims(1, 2)


class ByteLevelBPETokenizer(SubwordTokenizer):
    """RoBERTa's byte-level BPE, `<s>`/`</s>` as BOS/EOS, ids from `vocab.json`.

    `gpt2_words` splits the text as the reference does; keras-hub's
    `BytePairTokenizer` (whose own split knows only a few non-ASCII spaces)
    then encodes each word alone. Known difference: a NUL character is
    dropped here, where the reference encodes it as a byte.

    Args:
        vocabulary_file: `vocab.json` (token -> id).
        merges_file: `merges.txt`.
        add_prefix_space: put a space before the text (RoBERTa: no).
    """

    def __init__(self, vocabulary_file, merges_file, add_prefix_space=False, max_length=128, add_bos=True,
                 add_eos=True, normalize=False, **kwargs):
        import keras_hub

        super().__init__(max_length=max_length, add_bos=add_bos, add_eos=add_eos, normalize=normalize, **kwargs)
        self.vocabulary_file = os.fspath(vocabulary_file)
        self.merges_file = os.fspath(merges_file)
        self.add_prefix_space = add_prefix_space
        vocabulary, merges = self._vocabulary_and_merges()
        bos, pad, eos, unk = self._special_tokens()
        missing = [t for t in (bos, pad, eos, unk) if t not in vocabulary]
        if missing:
            raise ValueError(f"{self.vocabulary_file} lacks the special tokens {missing}.")
        self.bos_id, self.pad_id = vocabulary[bos], vocabulary[pad]
        self.eos_id, self.unk_id = vocabulary[eos], vocabulary[unk]
        self._vocabulary_size = max(vocabulary.values()) + 1
        self._bpe = keras_hub.tokenizers.BytePairTokenizer(vocabulary=vocabulary, merges=merges, dtype="int32")
        self.built = True  # Nothing to build: keras-hub's tables are made above.

    def _vocabulary_and_merges(self):
        """(token -> id, merges as `"a b"` lines), here from `vocabulary_file` and `merges_file`."""
        vocabulary = json.loads(_read_bytes(self.vocabulary_file, "BPE vocabulary"))
        lines = _read_bytes(self.merges_file, "BPE merges").decode("utf-8").splitlines()
        # A `#version` header, as GPT-2's and RoBERTa's files start, is no merge.
        return vocabulary, [line for line in lines if line and not line.startswith("#version")]

    def _special_tokens(self):
        """Begin, padding, end and unknown tokens."""
        return "<s>", "<pad>", "</s>", "<unk>"

    @property
    def vocabulary_size(self):
        return self._vocabulary_size

    def _tokenize_normalized(self, texts):
        # tensorflow-text's regex_split ends a string at NUL: drop NULs rather than the rest of the text.
        texts = tf.strings.regex_replace(texts, "\\x00", "")
        if self.add_prefix_space:
            texts = tf.strings.join([" ", texts])
        words = gpt2_words(texts)
        ids = self._bpe.tokenize(words.flat_values)
        if isinstance(ids, list):
            # Eagerly, keras-hub hands ragged results back as Python lists.
            ids = tf.ragged.constant(ids, dtype=tf.int32, ragged_rank=1)
        return words.with_flat_values(tf.cast(ids, tf.int32)).merge_dims(1, 2)

    def fingerprint(self):
        """The base fingerprint (vocabulary included) and the merges."""
        digest = hashlib.sha256(super().fingerprint().encode())
        digest.update(_read_bytes(self.merges_file, "BPE merges"))
        digest.update(str(self.add_prefix_space).encode())
        return digest.hexdigest()[:16]

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_file=self.vocabulary_file, merges_file=self.merges_file,
                      add_prefix_space=self.add_prefix_space)
        return config

    @property
    def asset_file(self):
        return self.vocabulary_file
