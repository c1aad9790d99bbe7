"""This package's tokenizers as Hugging Face tokenizer files: `tokenizer.json`, `tokenizer_config.json` and the
original vocabulary file, giving the same token ids to transformers and sentence-transformers.

- `WordPieceTokenizer` -> BERT's pipeline (`BertNormalizer`,
  `BertPreTokenizer`, WordPiece) with `vocab.txt`;
- `FairseqSentencePieceTokenizer` -> XLM-R's (the SentencePiece model's
  `Precompiled` table, whitespace split, `▁` before each word, a Unigram
  model in fairseq's id layout) with `sentencepiece.bpe.model`;
- `SentencePieceTokenizer` (from scratch, `tools/train_spm.py`) -> a Unigram
  model in the model's own ids, `<2xx>` language tokens kept whole, and the
  model file itself.

A tokenizer that runs `normalize_text` first (`normalize=True`: NFKC, one
symbol per quote and dash class, whitespace runs as one space) gets the same
steps as `tokenizers` normalizers in front. The first two keep the class
names of the checkpoints they came from (`BertTokenizer`,
`XLMRobertaTokenizer`) when they add nothing to the class's pipeline;
otherwise the class is `PreTrainedTokenizerFast`, which runs the file as
written (transformers 4 and 5 alike).
"""

import base64
import os
import shutil

import sentencepiece
from sentencepiece import sentencepiece_model_pb2

from tf_msemb.files import write_json_atomically
from tf_msemb.text import normalize
from tf_msemb.text import tokenizer_json
from tf_msemb.text import vocabulary
from tf_msemb.text.hf_tokenizers import FairseqSentencePieceTokenizer
from tf_msemb.text.tokenizers import SentencePieceTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
GENERIC_CLASS = "PreTrainedTokenizerFast"
# Longer words are one [UNK] in BERT's WordPiece (`max_input_chars_per_word`).
BERT_MAX_WORD_CHARACTERS = 100
METASPACE = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}


def _sequence(steps, kind="normalizers"):
    steps = [step for step in steps if step]
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else {"type": "Sequence", kind: steps}


def _added(token_id, content, special=True):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def _template(tokenizer, bos, eos):
    """The post-processor that puts `bos` / `eos` around a text as the tokenizer does."""
    single = ([{"SpecialToken": {"id": bos, "type_id": 0}}] if tokenizer.add_bos else []) + [
        {"Sequence": {"id": "A", "type_id": 0}}] + ([{"SpecialToken": {"id": eos, "type_id": 0}}]
                                                    if tokenizer.add_eos else [])
    specials = {}
    if tokenizer.add_bos:
        specials[bos] = {"id": bos, "ids": [tokenizer.bos_id], "tokens": [bos]}
    if tokenizer.add_eos:
        specials[eos] = {"id": eos, "ids": [tokenizer.eos_id], "tokens": [eos]}
    pair = single + [{"Sequence": {"id": "B", "type_id": 1}}] + (
        [{"SpecialToken": {"id": eos, "type_id": 1}}] if tokenizer.add_eos else [])
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def _document(added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def _wordpiece(tokenizer, directory):
    tokens = tokenizer.tokens()
    index = {token: i for i, token in enumerate(tokens)}
    pad, unk, cls, sep = tokenizer._special_tokens()
    specials = [t for t in (pad, unk, cls, sep, "[MASK]") if t in index]
    bert = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": tokenizer.split_cjk,
            "strip_accents": tokenizer.strip_accents, "lowercase": tokenizer.lowercase}
    document = _document(
        [_added(index[t], t) for t in specials],
        _sequence((normalize.huggingface_steps() if tokenizer.normalize else []) + [bert]),
        {"type": "BertPreTokenizer"}, _template(tokenizer, cls, sep),
        {"type": "WordPiece", "prefix": "##", "cleanup": True},
        {"type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##",
         "max_input_chars_per_word": tokenizer.max_word_characters, "vocab": index})
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{token}\n" for token in tokens))
    # transformers 5 rebuilds BertTokenizer's pipeline from this file's options, with its own word limit.
    standard = not tokenizer.normalize and tokenizer.max_word_characters == BERT_MAX_WORD_CHARACTERS
    config = {"tokenizer_class": "BertTokenizer" if standard else GENERIC_CLASS,
              "do_lower_case": tokenizer.lowercase, "strip_accents": tokenizer.strip_accents,
              "tokenize_chinese_chars": tokenizer.split_cjk, "cls_token": cls, "sep_token": sep, "pad_token": pad,
              "unk_token": unk}
    if "[MASK]" in index:
        config["mask_token"] = "[MASK]"
    return document, config, ["vocab.txt"]


def _proto(tokenizer):
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.proto)
    return proto


def _fairseq(tokenizer, directory):
    """XLM-R's tokenizer: every piece at the id this tokenizer gives it, the four specials and `<mask>` by name."""
    proto = _proto(tokenizer)
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    vocab = [None] * tokenizer.vocabulary_size
    named = {"<s>": tokenizer.bos_id, "<pad>": tokenizer.pad_id, "</s>": tokenizer.eos_id,
             "<unk>": tokenizer.unk_id, "<mask>": tokenizer.mask_id}
    for token, token_id in named.items():
        vocab[token_id] = [token, 0.0]
    for i, hf_id in enumerate(tokenizer._hf_ids):
        if not (processor.is_control(i) or processor.is_unknown(i)):
            vocab[hf_id] = [processor.id_to_piece(i), float(processor.get_score(i))]
    gaps = [i for i, entry in enumerate(vocab) if entry is None]
    if gaps:
        raise ValueError(f"{tokenizer.model_file}: ids {gaps[:5]} of the tokenizer's {len(vocab)} have no piece.")
    precompiled = {"type": "Precompiled",
                   "precompiled_charsmap": base64.b64encode(proto.normalizer_spec.precompiled_charsmap).decode()}
    document = _document(
        [_added(token_id, token) for token, token_id in sorted(named.items(), key=lambda item: item[1])],
        _sequence((normalize.huggingface_steps() if tokenizer.normalize else []) + [precompiled]),
        _sequence([{"type": "WhitespaceSplit"}, METASPACE], "pretokenizers"), _template(tokenizer, "<s>", "</s>"),
        METASPACE, {"type": "Unigram", "unk_id": tokenizer.unk_id, "byte_fallback": False, "vocab": vocab})
    shutil.copyfile(tokenizer.model_file, os.path.join(directory, "sentencepiece.bpe.model"))
    config = {"tokenizer_class": GENERIC_CLASS if tokenizer.normalize else "XLMRobertaTokenizer",
              "add_prefix_space": True, "bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>",
              "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}
    return document, config, ["sentencepiece.bpe.model"]


def _sentencepiece(tokenizer, directory):
    """A from-scratch SentencePiece Unigram model: the pieces in its own ids, control pieces as special tokens."""
    proto = _proto(tokenizer)
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        kind = sentencepiece_model_pb2.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)
        raise ValueError(f"{tokenizer.model_file} is a SentencePiece {kind} model; Hugging Face tokenizer files are "
                         "written for Unigram models (train_spm's default).")
    if proto.normalizer_spec.precompiled_charsmap or proto.normalizer_spec.name not in ("identity", ""):
        raise ValueError(f"{tokenizer.model_file} normalizes with SentencePiece's {proto.normalizer_spec.name} "
                         "rules; written here: models trained with identity rules (train_spm's).")
    kinds = sentencepiece_model_pb2.ModelProto.SentencePiece
    vocab, added = [], []
    for i, piece in enumerate(proto.pieces):
        vocab.append([piece.piece, float(piece.score)])
        if piece.type in (kinds.CONTROL, kinds.UNKNOWN):
            added.append(_added(i, piece.piece))
        elif piece.type == kinds.USER_DEFINED:  # the <2xx> language tokens: whole wherever they occur
            added.append(_added(i, piece.piece, special=False))
    # normalize_text leaves no runs of spaces; without it, SentencePiece's own handling of them.
    spaces = list(tokenizer_json.SENTENCEPIECE_SPACES)
    steps = (normalize.huggingface_steps() if tokenizer.normalize else spaces) + (
        [{"type": "Lowercase"}] if tokenizer.lowercase else [])
    document = _document(added, _sequence(steps), METASPACE, _template(tokenizer, vocabulary.BOS, vocabulary.EOS),
                         METASPACE, {"type": "Unigram", "unk_id": tokenizer.unk_id, "byte_fallback": False,
                                     "vocab": vocab})
    name = os.path.basename(tokenizer.model_file)
    shutil.copyfile(tokenizer.model_file, os.path.join(directory, name))
    config = {"tokenizer_class": GENERIC_CLASS, "bos_token": vocabulary.BOS, "eos_token": vocabulary.EOS,
              "cls_token": vocabulary.BOS, "sep_token": vocabulary.EOS, "pad_token": vocabulary.PAD,
              "unk_token": vocabulary.UNK}
    return document, config, [name]


def _unigram_json(tokenizer, directory):
    """A `tokenizer.json` Unigram model (XLM-R's, as transformers 5 saves it): the file itself, with
    `normalize_text`'s steps in front where the tokenizer runs them."""
    document = tokenizer_json.read_tokenizer_json(tokenizer.tokenizer_file)
    if tokenizer.normalize:
        document["normalizer"] = _sequence(normalize.huggingface_steps() + [document.get("normalizer")])
    names = {token["id"]: token["content"] for token in document.get("added_tokens", [])}
    pieces = {i: piece for i, (piece, _) in enumerate(document["model"]["vocab"])}
    token = lambda i: names.get(i, pieces.get(i))  # noqa: E731
    xlm_r = (token(tokenizer.bos_id), token(tokenizer.eos_id)) == ("<s>", "</s>")
    config = {"tokenizer_class": "XLMRobertaTokenizer" if xlm_r and not tokenizer.normalize else GENERIC_CLASS,
              "bos_token": token(tokenizer.bos_id), "eos_token": token(tokenizer.eos_id),
              "cls_token": token(tokenizer.bos_id), "sep_token": token(tokenizer.eos_id),
              "pad_token": token(tokenizer.pad_id), "unk_token": token(tokenizer.unk_id)}
    if xlm_r:
        config["add_prefix_space"] = True
    return document, config, []


def write_tokenizer_files(tokenizer, directory):
    """Writes `tokenizer.json`, `tokenizer_config.json` and the vocabulary file of `tokenizer` into `directory`.

    Returns the names written. The length limit is the tokenizer's
    (`model_max_length`, special tokens included, as it truncates); a prompt
    is not part of these files (sentence-transformers applies prompts).
    """
    if not (tokenizer.add_bos or tokenizer.add_eos):
        raise ValueError(f"{type(tokenizer).__name__} adds neither a begin nor an end token: an empty text would "
                         "have no token in Hugging Face's tokenizers, where this tokenizer gives it <unk>.")
    if isinstance(tokenizer, WordPieceTokenizer):
        document, config, files = _wordpiece(tokenizer, directory)
    elif isinstance(tokenizer, FairseqSentencePieceTokenizer):
        document, config, files = _fairseq(tokenizer, directory)
    elif isinstance(tokenizer, SentencePieceTokenizer):
        document, config, files = _sentencepiece(tokenizer, directory)
    elif isinstance(tokenizer, tokenizer_json.JsonUnigramTokenizer):
        document, config, files = _unigram_json(tokenizer, directory)
    else:
        raise ValueError(f"{type(tokenizer).__name__} is not written as Hugging Face tokenizer files; written: "
                         "WordPieceTokenizer (and JsonWordPieceTokenizer), FairseqSentencePieceTokenizer, "
                         "SentencePieceTokenizer, JsonUnigramTokenizer.")
    config["model_max_length"] = tokenizer.max_length
    write_json_atomically(os.path.join(directory, TOKENIZER_FILE), document, indent=2, ensure_ascii=False)
    write_json_atomically(os.path.join(directory, TOKENIZER_CONFIG_FILE), config, indent=2, ensure_ascii=False)
    return [TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, *files]
