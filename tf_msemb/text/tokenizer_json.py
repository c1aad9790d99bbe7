"""In-graph tokenizers from a Hugging Face `tokenizer.json` alone (what transformers 5 saves).

`tokenizer.json` holds the model (vocabulary, merges, scores) and a pipeline
(normalizer, pre-tokenizer, post-processor). Three model kinds are rebuilt
with the tokenizers of `tokenizers` and `hf_tokenizers`, token ids equal to
the reference's:

- `WordPiece` -> `JsonWordPieceTokenizer` (the vocabulary in id order),
- byte-level `BPE` -> `JsonByteLevelBPETokenizer` (vocabulary and merges),
- `Unigram` -> `JsonUnigramTokenizer`: the pieces, their scores and the
  `Precompiled` normalizer's table go into a SentencePiece `ModelProto`
  built in memory, in the vocabulary's own id order (XLM-R's is already
  fairseq's: `<s>`, `<pad>`, `</s>`, `<unk>`, pieces, `<mask>`).

Which pipeline runs is the caller's choice (`pretrained.directory_tokenizer`):
transformers 5 rebuilds a known tokenizer class's own pipeline and reads only
the model part of the file, while a file of no known class runs as written;
`pipeline_options` reads that pipeline and names any part it cannot
reproduce.
"""

import base64
import json
import os

import tensorflow as tf

from tf_msemb.text import normalize
from tf_msemb.text.hf_tokenizers import ByteLevelBPETokenizer
from tf_msemb.text.hf_tokenizers import spaces_to_blanks
from tf_msemb.text.hf_tokenizers import tokenizer_json_ids
from tf_msemb.text.tokenizers import SentencePieceSegmented
from tf_msemb.text.tokenizers import SubwordTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer
from tf_msemb.text.tokenizers import _read_bytes

MODEL_KINDS = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}
# SentencePiece's own whitespace handling (remove_extra_whitespaces: runs of the plain space as one, none at the
# ends) as `tokenizers` normalizers, as `text.tokenizer_files` writes them for a model run without normalize_text.
SENTENCEPIECE_SPACES = ({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
                        {"type": "Replace", "pattern": {"Regex": "\\A +| +\\z"}, "content": ""})


def read_tokenizer_json(path):
    """The parsed file; its model must be one of `MODEL_KINDS`."""
    document = json.loads(_read_bytes(os.fspath(path), "tokenizer.json"))
    model_type = (document.get("model") or {}).get("type")
    if model_type not in MODEL_KINDS:
        raise ValueError(f"{path} has a {model_type} model; supported: {', '.join(MODEL_KINDS)}.")
    return document


def model_kind(path):
    """`"wordpiece"`, `"bpe"` or `"unigram"` for the model in `path`."""
    return MODEL_KINDS[read_tokenizer_json(path)["model"]["type"]]


def _parts(node, key):
    """A pipeline node as a list of its steps (a `Sequence` unrolled, none as [])."""
    if node is None:
        return []
    if node.get("type") == "Sequence":
        return [step for inner in node[key] for step in _parts(inner, key)]
    return [node]


def _unsupported(path, what, node, kind):
    return ValueError(f"{path}: {what} {node.get('type')} is not reproduced for a {kind} model.")


def _special_pair(path, document):
    """(begin, end) tokens the post-processor puts around a single text."""
    processor = document.get("post_processor") or {}
    if processor.get("type") in ("RobertaProcessing", "BertProcessing"):
        return processor["cls"][0], processor["sep"][0]
    if processor.get("type") == "TemplateProcessing":
        single = processor["single"]
        if (len(single) == 3 and "SpecialToken" in single[0] and "Sequence" in single[1]
                and "SpecialToken" in single[2]):
            return single[0]["SpecialToken"]["id"], single[2]["SpecialToken"]["id"]
    raise ValueError(f"{path}: post_processor {processor.get('type')} does not put one token before and one "
                     "after the text.")


def pipeline_options(path):
    """The options of the tokenizer that runs `path`'s own pipeline, as `directory_tokenizer` passes them.

    Raises, naming the normalizer, pre-tokenizer or post-processor type,
    where this package would tokenize differently.
    """
    document = read_tokenizer_json(path)
    kind = MODEL_KINDS[document["model"]["type"]]
    normalizers = _parts(document.get("normalizer"), "normalizers")
    pre_tokenizers = _parts(document.get("pre_tokenizer"), "pretokenizers")
    bos, eos = _special_pair(path, document)
    options = {"bos_token": bos, "eos_token": eos}
    # `normalize_text` in front (as `text.tokenizer_files` writes it for a tokenizer that runs it).
    steps = normalize.huggingface_steps()
    if normalizers[:len(steps)] == steps:
        options["normalize"] = True
        normalizers = normalizers[len(steps):]
    if kind == "wordpiece":
        if len(normalizers) != 1 or normalizers[0]["type"] != "BertNormalizer" \
                or not normalizers[0].get("clean_text", True):
            node = normalizers[0] if normalizers else {"type": None}
            raise _unsupported(path, "normalizer", node, kind)
        if [p["type"] for p in pre_tokenizers] != ["BertPreTokenizer"]:
            raise _unsupported(path, "pre_tokenizer", (pre_tokenizers or [{"type": None}])[0], kind)
        normalizer = normalizers[0]
        return options | {"lowercase": normalizer.get("lowercase", True),
                          "strip_accents": normalizer.get("strip_accents"),
                          "split_cjk": normalizer.get("handle_chinese_chars", True),
                          "max_word_characters": document["model"].get("max_input_chars_per_word", 100)}
    if kind == "bpe":
        if normalizers:
            raise _unsupported(path, "normalizer", normalizers[0], kind)
        if len(pre_tokenizers) != 1 or pre_tokenizers[0]["type"] != "ByteLevel" \
                or not pre_tokenizers[0].get("use_regex", True):
            raise _unsupported(path, "pre_tokenizer", (pre_tokenizers or [{"type": None}])[0], kind)
        return options | {"add_prefix_space": pre_tokenizers[0].get("add_prefix_space", False)}
    # Unigram: SentencePiece's own space handling (which the model built from the file does anyway), lower-casing,
    # and the `Precompiled` table (SentencePiece's own normalization), in this order; nothing else is reproduced.
    if [dict(n) for n in normalizers[:2]] == [dict(n) for n in SENTENCEPIECE_SPACES]:
        normalizers = normalizers[2:]
    if normalizers and normalizers[0]["type"] == "Lowercase":
        options["lowercase"] = True
        normalizers = normalizers[1:]
    unsupported = [n for n in normalizers if n["type"] != "Precompiled"] + normalizers[1:]
    if unsupported:
        raise _unsupported(path, "normalizer", unsupported[0], kind)
    # SentencePiece's own splitting: a `▁` before each word, after a split at every space (XLM-R) or at the plain
    # space only (a from-scratch model's).
    steps = [p["type"] for p in pre_tokenizers]
    metaspace = pre_tokenizers[-1] if steps in (["Metaspace"], ["WhitespaceSplit", "Metaspace"]) else None
    if metaspace is None or metaspace.get("replacement", "\u2581") != "\u2581" \
            or metaspace.get("prepend_scheme", "always") != "always" or not metaspace.get("split", True):
        raise _unsupported(path, "pre_tokenizer", (pre_tokenizers or [{"type": None}])[-1], kind)
    return options | {"whitespace_split": steps[0] == "WhitespaceSplit"}


class JsonWordPieceTokenizer(WordPieceTokenizer):
    """`WordPieceTokenizer` with the vocabulary of a `tokenizer.json` (`WordPieceTokenizer`'s options otherwise).

    Args:
        tokenizer_file: the `tokenizer.json` (a WordPiece model with `##` suffixes).
        bos_token, eos_token: the tokens around each text (BERT: `[CLS]`, `[SEP]`).
    """

    def __init__(self, tokenizer_file, bos_token="[CLS]", eos_token="[SEP]", **kwargs):
        self.tokenizer_file = os.fspath(tokenizer_file)
        self.bos_token, self.eos_token = bos_token, eos_token
        model = read_tokenizer_json(self.tokenizer_file)["model"]
        if model["type"] != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##":
            raise ValueError(f"{self.tokenizer_file} holds no WordPiece model with `##` suffixes.")
        self.unk_token = model.get("unk_token", "[UNK]")
        super().__init__(self.tokenizer_file, **kwargs)

    def tokens(self):
        vocabulary = read_tokenizer_json(self.tokenizer_file)["model"]["vocab"]
        return _in_id_order(self.tokenizer_file, vocabulary)

    def _special_tokens(self):
        return "[PAD]", self.unk_token, self.bos_token, self.eos_token

    def get_config(self):
        config = super().get_config()
        del config["vocabulary_file"]
        config.update(tokenizer_file=self.tokenizer_file, bos_token=self.bos_token, eos_token=self.eos_token)
        return config


def _in_id_order(path, vocabulary):
    """A token -> id mapping as the list of tokens; the ids must be 0..n-1."""
    tokens = sorted(vocabulary, key=vocabulary.get)
    if [vocabulary[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(f"{path}: the vocabulary's ids are not 0..{len(tokens) - 1} without gaps.")
    return tokens


class JsonByteLevelBPETokenizer(ByteLevelBPETokenizer):
    """`ByteLevelBPETokenizer` with the vocabulary and merges of a `tokenizer.json`.

    Args:
        tokenizer_file: the `tokenizer.json` (a byte-level BPE model).
        bos_token, eos_token: the tokens around each text (RoBERTa: `<s>`, `</s>`).
        add_prefix_space: put a space before the text.
    """

    def __init__(self, tokenizer_file, bos_token="<s>", eos_token="</s>", add_prefix_space=False, **kwargs):
        self.tokenizer_file = os.fspath(tokenizer_file)
        self.bos_token, self.eos_token = bos_token, eos_token
        model = read_tokenizer_json(self.tokenizer_file)["model"]
        if model["type"] != "BPE":
            raise ValueError(f"{self.tokenizer_file} holds a {model['type']} model, not BPE.")
        unsupported = [key for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix")
                       if model.get(key)] + [key for key in ("byte_fallback", "ignore_merges") if model.get(key)]
        if unsupported:
            raise ValueError(f"{self.tokenizer_file}: BPE option {unsupported[0]} is not reproduced.")
        self.unk_token = model.get("unk_token") or "<unk>"
        super().__init__(self.tokenizer_file, self.tokenizer_file, add_prefix_space=add_prefix_space, **kwargs)

    def _vocabulary_and_merges(self):
        model = read_tokenizer_json(self.tokenizer_file)["model"]
        # tokenizers writes merges as `"a b"` strings (before 0.20) or `[a, b]` pairs.
        merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model["merges"]]
        return model["vocab"], merges

    def _special_tokens(self):
        return self.bos_token, "<pad>", self.eos_token, self.unk_token

    def fingerprint(self):
        return SubwordTokenizer.fingerprint(self)

    def get_config(self):
        config = super().get_config()
        del config["vocabulary_file"], config["merges_file"]
        config.update(tokenizer_file=self.tokenizer_file, bos_token=self.bos_token, eos_token=self.eos_token)
        return config

    @property
    def asset_file(self):
        return self.tokenizer_file


def unigram_model_proto(path, document=None):
    """A SentencePiece `ModelProto` (serialized) of the Unigram model in `path`, ids as in the file.

    Special tokens (`added_tokens` marked special) become control pieces,
    never produced from text, other added tokens user-defined ones, never split; the `Precompiled` normalizer's table becomes
    SentencePiece's own, with its whitespace handling (one `▁` before each
    word, runs of spaces as one).
    """
    from sentencepiece import sentencepiece_model_pb2

    document = document or read_tokenizer_json(path)
    model = document["model"]
    if model["type"] != "Unigram":
        raise ValueError(f"{path} holds a {model['type']} model, not Unigram.")
    if model.get("byte_fallback"):
        raise ValueError(f"{path}: Unigram option byte_fallback is not reproduced.")
    unk_id = model.get("unk_id")
    if unk_id is None:
        raise ValueError(f"{path}: the Unigram model has no unk_id.")
    special = {token["id"] for token in document.get("added_tokens", []) if token.get("special")}
    # Other added tokens (a from-scratch model's <2xx>) are taken whole wherever they occur, as `tokenizers` does.
    whole = {token["id"] for token in document.get("added_tokens", []) if not token.get("special")}
    proto = sentencepiece_model_pb2.ModelProto()
    piece_type = sentencepiece_model_pb2.ModelProto.SentencePiece
    for i, (piece, score) in enumerate(model["vocab"]):
        entry = proto.pieces.add()
        entry.piece, entry.score = piece, score
        entry.type = (piece_type.UNKNOWN if i == unk_id else piece_type.CONTROL if i in special
                      else piece_type.USER_DEFINED if i in whole else piece_type.NORMAL)
    proto.trainer_spec.model_type = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    proto.trainer_spec.unk_id = unk_id
    proto.trainer_spec.unk_piece = model["vocab"][unk_id][0]
    charsmaps = [n["precompiled_charsmap"] for n in _parts(document.get("normalizer"), "normalizers")
                 if n["type"] == "Precompiled" and n.get("precompiled_charsmap")]
    proto.normalizer_spec.name = "tokenizer.json" if charsmaps else "identity"
    if charsmaps:
        proto.normalizer_spec.precompiled_charsmap = base64.b64decode(charsmaps[0])
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = True
    proto.normalizer_spec.escape_whitespaces = True
    return proto.SerializeToString()


class JsonUnigramTokenizer(SentencePieceSegmented, SubwordTokenizer):
    """A `tokenizer.json` Unigram model (XLM-R's) run by SentencePiece, with the file's ids.

    With `whitespace_split` every Unicode space is a word break first, as
    the reference's whitespace split (see `FairseqSentencePieceTokenizer` for
    the one known difference); without, only the plain space is (a
    from-scratch SentencePiece model's file).

    Args:
        tokenizer_file: the `tokenizer.json`; the model built from it is embedded in the graph.
        bos_token, eos_token: the tokens around each text (XLM-R: `<s>`, `</s>`).
        whitespace_split: every Unicode space breaks words (XLM-R's `WhitespaceSplit`).
        lowercase: lower-case the text (UTF-8 aware, after `normalize`).
    """

    def __init__(self, tokenizer_file, bos_token="<s>", eos_token="</s>", max_length=128, add_bos=True, add_eos=True,
                 normalize=False, whitespace_split=True, lowercase=False, **kwargs):
        super().__init__(max_length=max_length, add_bos=add_bos, add_eos=add_eos, normalize=normalize, **kwargs)
        self.tokenizer_file = os.fspath(tokenizer_file)
        self.bos_token, self.eos_token = bos_token, eos_token
        self.whitespace_split, self.lowercase = whitespace_split, lowercase
        document = read_tokenizer_json(self.tokenizer_file)
        self.proto = unigram_model_proto(self.tokenizer_file, document)
        ids, self.unk_id, self._vocabulary_size = tokenizer_json_ids(self.tokenizer_file, document)
        missing = [t for t in (bos_token, eos_token) if t not in ids]
        if missing:
            raise ValueError(f"{self.tokenizer_file} lacks the special tokens {missing}.")
        self.bos_id, self.eos_id = ids[bos_token], ids[eos_token]
        self.pad_id = ids.get("<pad>", self.unk_id)

    @property
    def vocabulary_size(self):
        return self._vocabulary_size

    def sentencepiece_text(self, texts):
        if self.lowercase:
            texts = tf.strings.lower(texts, encoding="utf-8")
        return spaces_to_blanks(texts) if self.whitespace_split else texts

    def get_config(self):
        config = super().get_config()
        config.update(tokenizer_file=self.tokenizer_file, bos_token=self.bos_token, eos_token=self.eos_token,
                      whitespace_split=self.whitespace_split, lowercase=self.lowercase)
        return config

    @property
    def asset_file(self):
        return self.tokenizer_file
