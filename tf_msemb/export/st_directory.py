"""An encoder written as a sentence-transformers directory (a Hugging Face model directory with its modules).

    Transformer (config.json, model.safetensors, tokenizer files)
      -> Pooling (1_Pooling) -> Dense* (k_Dense) -> Normalize (k_Normalize)

It computes what the export computes: the backbone as its transformers
architecture (`transformers_weights`), the tokenizer's files giving the same
ids (`text.tokenizer_files`), the pooling, every Dense layer or projection
after it, then the L2 normalization every export applies; a prompt the
export puts before every input is the default prompt, and an `output_dim`
cut is `truncate_dim`. The module names are those sentence-transformers
2.x-5.x saves, which 6.x reads too, so the directory also loads where
sentence-transformers 5 provides ONNX and OpenVINO backends (a pooling of
several modes in an order of its own needs 6.x's `pooling_mode` list).
`models.pretrained.load_pretrained` reads it back.
"""

import os
import shutil

import numpy as np

from tf_msemb.files import write_directory_atomically
from tf_msemb.files import write_json_atomically
from tf_msemb.export.model_card import training_sections
from tf_msemb.export.saved_model import OPERATIVE_CONFIG
from tf_msemb.export.transformers_weights import transformers_checkpoint
from tf_msemb.models.encoder import Embedder
from tf_msemb.models.heads import DenseHead
from tf_msemb.models.heads import PrincipalAxes
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.text.tokenizer_files import write_tokenizer_files

# Our pooling names -> sentence-transformers' modes, in the order its 2.x-5.x flags concatenate them.
POOLING_MODES = {"first": "cls", "max": "max", "mean": "mean", "mean_sqrt_len": "mean_sqrt_len_tokens"}
LEGACY_FLAGS = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens", "mean": "pooling_mode_mean_tokens",
                "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens"}
# Keras activation (its function's name) -> the torch module sentence-transformers' Dense builds.
DENSE_ACTIVATIONS = {"tanh": "torch.nn.modules.activation.Tanh", "linear": "torch.nn.modules.linear.Identity",
                     "relu": "torch.nn.modules.activation.ReLU", "sigmoid": "torch.nn.modules.activation.Sigmoid",
                     "gelu": "torch.nn.modules.activation.GELU"}
MODULE_TYPES = {"Transformer": "sentence_transformers.models.Transformer",
                "Pooling": "sentence_transformers.models.Pooling", "Dense": "sentence_transformers.models.Dense",
                "Normalize": "sentence_transformers.models.Normalize"}
DEFAULT_PROMPT_NAME = "default"


def _write_json(path, value):
    write_json_atomically(path, value, indent=2, ensure_ascii=False)


def _save_tensors(path, tensors):
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}, path, metadata={"format": "pt"})


def _dense(layer, name):
    """`(config, tensors)` of a sentence-transformers Dense module for a Keras `Dense` layer."""
    activation = getattr(layer.activation, "__name__", str(layer.activation))
    if activation not in DENSE_ACTIVATIONS:
        raise ValueError(f"{name} has activation {activation}; sentence-transformers' Dense takes "
                         f"{', '.join(DENSE_ACTIVATIONS)}.")
    kernel = np.asarray(layer.kernel.numpy(), np.float32)
    tensors = {"linear.weight": kernel.T}
    if layer.use_bias:
        tensors["linear.bias"] = np.asarray(layer.bias.numpy(), np.float32)
    return {"in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]), "bias": bool(layer.use_bias),
            "activation_function": DENSE_ACTIVATIONS[activation]}, tensors


def modules_of(encoder):
    """`(embedder, dense layers in order)`: the pooled `Embedder` inside `encoder` and the Keras Dense layers after it.

    Raises, naming the class, for anything that is not an `Embedder` under
    `DenseHead`s and `ProjectedEncoder`s, a pooling sentence-transformers has
    no mode for, or a normalization before a Dense layer other than a `PrincipalAxes` rotation.
    """
    dense, rotations, current = [], [], encoder
    while not isinstance(current, Embedder):
        if isinstance(current, DenseHead):
            dense = list(current.dense) + dense
        elif isinstance(current, ProjectedEncoder):
            dense = [current.projection] + dense
            if isinstance(current, PrincipalAxes):
                rotations.append(current.projection)
        else:
            raise ValueError(f"{type(current).__name__} is not written as sentence-transformers modules; written: an "
                             "Embedder (SentenceEncoder, a pretrained start) under DenseHead / ProjectedEncoder.")
        current = current.encoder
    spec = current.pooling_spec
    names = spec.split("+") if isinstance(spec, str) else None
    if names is None or any(name not in POOLING_MODES for name in names):
        raise ValueError(f"pooling {spec!r} has no sentence-transformers Pooling mode; written: "
                         f"{', '.join(POOLING_MODES)} and their concatenations.")
    # A rotation keeps lengths, so normalizing after it (Pooling -> Dense -> Normalize) gives the same vectors.
    if current.normalize and any(layer not in rotations for layer in dense):
        raise ValueError(f"{current.name} L2-normalizes before its Dense layers, which sentence-transformers' module "
                         "order here (Pooling -> Dense -> Normalize) does not hold.")
    return current, dense


def _modes(embedder):
    """sentence-transformers' pooling modes of `embedder`, in its concatenation order."""
    return [POOLING_MODES[name] for name in embedder.pooling_spec.split("+")]


def _pooling_config(embedder):
    modes = _modes(embedder)
    config = {"word_embedding_dimension": int(embedder.hidden_dim)}
    legacy = [mode for mode in LEGACY_FLAGS if mode in modes]
    if legacy == modes:
        config.update({flag: mode in modes for mode, flag in LEGACY_FLAGS.items()})
        config.update(pooling_mode_weightedmean_tokens=False, pooling_mode_lasttoken=False)
    else:
        config["pooling_mode"] = modes  # sentence-transformers 6's form: concatenated in this order
    config["include_prompt"] = True
    return config


def prompt_settings(tokenizer):
    """`(prompts, default_prompt_name)` for `config_sentence_transformers.json`: the tokenizer's named prompts, and
    as the default the prompt it puts before every input (named `"default"` where no name has its text)."""
    prompts = dict(tokenizer.prompts)
    if not tokenizer.prompt:
        return prompts, None
    name = next((key for key, text in prompts.items() if text == tokenizer.prompt), None)
    if name is None:
        name = DEFAULT_PROMPT_NAME if DEFAULT_PROMPT_NAME not in prompts else f"{DEFAULT_PROMPT_NAME}_applied"
        prompts[name] = tokenizer.prompt
    return prompts, name


def write_sentence_transformers(tokenizer, encoder, directory, output_dim=None, metadata=None, source=None):
    """Writes `encoder` and `tokenizer` as a sentence-transformers directory at `directory`; returns the path.

    `output_dim` (an export's cut) becomes `truncate_dim`; `metadata` (the
    export's `tf_msemb_export.json`) gives the card its provenance and dev
    figures, `source` the directory it came from (`export_dir`'s operative
    config is copied when it has one).
    """
    embedder, dense = modules_of(encoder)
    return write_directory_atomically(directory, lambda partial: _write(
        tokenizer, encoder, embedder, dense, partial, output_dim, metadata, source))


def _write(tokenizer, encoder, embedder, dense, directory, output_dim, metadata, source):
    """Writes every file of the directory (`write_sentence_transformers`) into `directory`."""
    name = os.path.basename(os.path.abspath(directory)).removesuffix(".partial")
    config, tensors = transformers_checkpoint(embedder.backbone, pad_token_id=tokenizer.pad_id,
                                              bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id)
    config["dtype"] = "float32"
    _write_json(os.path.join(directory, "config.json"), config)
    _save_tensors(os.path.join(directory, "model.safetensors"), tensors)
    files = write_tokenizer_files(tokenizer, directory)
    modules = [("Transformer", "")]
    os.makedirs(os.path.join(directory, "1_Pooling"))
    _write_json(os.path.join(directory, "1_Pooling", "config.json"), _pooling_config(embedder))
    modules.append(("Pooling", "1_Pooling"))
    for layer in dense:
        folder = f"{len(modules)}_Dense"
        os.makedirs(os.path.join(directory, folder))
        dense_config, dense_tensors = _dense(layer, f"{type(encoder).__name__} layer {layer.name}")
        _write_json(os.path.join(directory, folder, "config.json"), dense_config)
        _save_tensors(os.path.join(directory, folder, "model.safetensors"), dense_tensors)
        modules.append(("Dense", folder))
    folder = f"{len(modules)}_Normalize"
    os.makedirs(os.path.join(directory, folder))
    modules.append(("Normalize", folder))
    _write_json(os.path.join(directory, "modules.json"),
                [{"idx": i, "name": str(i), "path": path, "type": MODULE_TYPES[kind]}
                 for i, (kind, path) in enumerate(modules)])
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": tokenizer.max_length, "do_lower_case": False})
    prompts, default_name = prompt_settings(tokenizer)
    st_config = {"model_type": "SentenceTransformer", "prompts": prompts, "default_prompt_name": default_name,
                 "similarity_fn_name": "cosine"}
    if output_dim is not None and output_dim != encoder.output_dim:
        st_config["truncate_dim"] = int(output_dim)
    _write_json(os.path.join(directory, "config_sentence_transformers.json"), st_config)
    if source and os.path.exists(os.path.join(source, OPERATIVE_CONFIG)):
        shutil.copyfile(os.path.join(source, OPERATIVE_CONFIG), os.path.join(directory, OPERATIVE_CONFIG))
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        f.write(render_card(name, tokenizer, encoder, embedder, dense, config, st_config, files, metadata))


def _module_lines(embedder, dense, config, tokenizer):
    lines = [f"(0): Transformer: {config['architectures'][0]}, {config.get('num_hidden_layers', config.get('n_layers'))} "
             f"layers, {config.get('hidden_size', config.get('dim'))} wide, {config['vocab_size']} tokens "
             f"({type(tokenizer).__name__}), max_seq_length {tokenizer.max_length}",
             f"(1): Pooling: {', '.join(_modes(embedder))}, "
             f"{embedder.output_dim} wide"]
    for layer in dense:
        activation = getattr(layer.activation, "__name__", "")
        lines.append(f"({len(lines)}): Dense: {layer.kernel.shape[0]} -> {layer.kernel.shape[1]}, {activation}")
    lines.append(f"({len(lines)}): Normalize")
    return "\n".join(lines)


def render_card(name, tokenizer, encoder, embedder, dense, config, st_config, files, metadata=None):
    """The directory's README.md in sentence-transformers' style: what it is, its modules, how to load it, where it
    came from and its dev figures. Names no path of this machine."""
    metadata = metadata or {}
    width = int(encoder.output_dim)
    truncate = st_config.get("truncate_dim")
    matryoshka = (metadata.get("objective") or {}).get("matryoshka")
    prompts = st_config["prompts"]
    rows = [("architecture", f"{config['architectures'][0]} (`config.json`, `model.safetensors`)"),
            ("tokenizer", ", ".join(f"`{f}`" for f in files)),
            ("maximum sequence length", f"{tokenizer.max_length} tokens, special tokens included"),
            ("output dimension", f"{width}" + (f"; `truncate_dim` {truncate}: the export's vectors are the first "
                                               f"{truncate}" if truncate else "")),
            ("Matryoshka widths", str(matryoshka) if matryoshka else "none"),
            ("similarity", "cosine (vectors are L2-normalized)"),
            ("prompts", ", ".join(f"{k}: {v!r}" for k, v in prompts.items()) or "none"),
            ("default prompt", st_config["default_prompt_name"] or "none")]
    if metadata.get("compute_precision") not in (None, "float32"):
        rows.append(("precision", f"float32 weights (the export computed in {metadata['compute_precision']})"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    pooling = " + ".join(_modes(embedder))
    return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags:
- sentence-transformers
- sentence-similarity
- feature-extraction
- tf_msemb
---

# {name}

A sentence encoder trained with tf_msemb and written as a sentence-transformers directory: it maps text to
{width}-dimensional unit vectors (cosine similarity), computing what the tf_msemb SavedModel it was written from
computes.

## Model

| | |
|---|---|
{table}

```
{_module_lines(embedder, dense, config, tokenizer)}
```

## How to load it

sentence-transformers (this directory's path as the model name):

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer({name!r})
vectors = model.encode(["Hallo Welt", "hello world"])
print(model.similarity(vectors, vectors))
```

transformers alone: the tokenizer and model, then {pooling} pooling over the real tokens{
" and the Dense layers in `*_Dense/`" if dense else ""}, then L2 normalization.

```python
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained({name!r})
model = AutoModel.from_pretrained({name!r})
```
{training_sections(metadata)}"""
