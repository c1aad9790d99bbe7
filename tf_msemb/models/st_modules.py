"""sentence-transformers' module files in a checkpoint directory: pooling, Dense, Normalize and prompts.

`modules.json` lists the modules in order; this package reproduces
Transformer -> Pooling -> Dense* -> Normalize?, as sentence-transformers
runs them, and names any other module. Pooling modes come from
`<Pooling>/config.json` in either format (2.x-5.x flags, concatenated in
sentence-transformers' fixed order; 6.x `pooling_mode`, a name or a list
concatenated in list order). Dense modules come from
`<Dense>/config.json` and `<Dense>/model.safetensors`. Prompts come from
`config_sentence_transformers.json`.
"""

import json
import os

import numpy as np

from tf_msemb.models.encoder import TOKEN_SHAPES
from tf_msemb.models.heads import DenseHead

# sentence-transformers' pooling modes -> this package's pooling names.
POOLING_MODES = {"cls": "first", "max": "max", "mean": "mean", "mean_sqrt_len_tokens": "mean_sqrt_len"}
# The 2.x-5.x flags in the order sentence-transformers concatenates them, and their 6.x mode names.
LEGACY_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# torch activation class (the last part of the saved name) -> Keras activation.
DENSE_ACTIVATIONS = {"Tanh": "tanh", "Identity": "linear", "ReLU": "relu", "Sigmoid": "sigmoid", "GELU": "gelu"}
MODULE_KINDS = ("Transformer", "Pooling", "Dense", "Normalize")
DENSE_WEIGHTS = "model.safetensors"


def read_json(directory, name):
    """The parsed file `directory/name`, or None when it is absent."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_modules(directory):
    """`[(kind, folder)]` from `modules.json` (kind one of `MODULE_KINDS`); without the file, Transformer + Pooling.

    Raises, naming the module, for any other module or order.
    """
    modules = read_json(directory, "modules.json")
    if modules is None:
        return [("Transformer", ""), ("Pooling", "1_Pooling")]
    path = os.path.join(directory, "modules.json")
    result = []
    for module in modules:
        kind = module["type"].rsplit(".", 1)[-1]
        if kind not in MODULE_KINDS:
            raise ValueError(f"{path} lists module {module['type']}; supported: {', '.join(MODULE_KINDS)}.")
        result.append((kind, module.get("path", "")))
    kinds = [kind for kind, _ in result]
    dense_count = kinds.count("Dense")
    expected = ["Transformer", "Pooling"] + ["Dense"] * dense_count + ["Normalize"] * ("Normalize" in kinds)
    if kinds != expected:
        raise ValueError(f"{path} orders its modules {' -> '.join(kinds)}; supported: Transformer -> Pooling -> "
                         "Dense (any number) -> Normalize (optional).")
    return result


def pooling_modes(directory, folder):
    """(sentence-transformers' mode names in output order, include_prompt) of the pooling in `folder`."""
    config = read_json(directory, os.path.join(folder, "config.json")) or {}
    if "pooling_mode" in config:
        named = config["pooling_mode"]
        modes = [named] if isinstance(named, str) else list(named)
    else:
        modes = [mode for flag, mode in LEGACY_FLAGS.items() if config.get(flag)]
    return modes or ["mean"], config.get("include_prompt", True)


def pooling_spec(directory, folder):
    """This package's pooling (`"first+mean"` for a concatenation) for the pooling in `folder`.

    Raises, naming the file and the modes, for modes it cannot reproduce.
    """
    modes, _ = pooling_modes(directory, folder)
    unsupported = [mode for mode in modes if mode not in POOLING_MODES]
    if unsupported:
        raise ValueError(f"{os.path.join(directory, folder, 'config.json')} asks for pooling "
                         f"{', '.join(unsupported)}; supported: {', '.join(POOLING_MODES)} and concatenations of "
                         "them (or pass load_pretrained.pooling).")
    return "+".join(POOLING_MODES[mode] for mode in modes)


def dense_layers(directory, folders):
    """One dict per Dense folder: `units`, `activation`, `use_bias`, and its `kernel` `[in, out]` and `bias`."""
    from safetensors.numpy import load_file

    layers = []
    for folder in folders:
        config_file = os.path.join(directory, folder, "config.json")
        config = read_json(directory, os.path.join(folder, "config.json"))
        if config is None:
            raise FileNotFoundError(f"{config_file} not found: the Dense module needs it.")
        if config.get("use_residual"):
            raise ValueError(f"{config_file} sets use_residual; Dense modules with a residual are not supported.")
        activation = config.get("activation_function", "torch.nn.modules.activation.Tanh").rsplit(".", 1)[-1]
        if activation not in DENSE_ACTIVATIONS:
            raise ValueError(f"{config_file} has activation_function {config['activation_function']}; supported: "
                             f"{', '.join(DENSE_ACTIVATIONS)}.")
        weights_file = os.path.join(directory, folder, DENSE_WEIGHTS)
        if not os.path.exists(weights_file):
            others = [f for f in ("pytorch_model.bin",) if os.path.exists(os.path.join(directory, folder, f))]
            found = f"; it has {others[0]}, resave it with safe_serialization=True" if others else ""
            raise FileNotFoundError(f"{weights_file} not found (only safetensors weights are read{found}).")
        tensors = load_file(weights_file)
        shape = (config["out_features"], config["in_features"])
        use_bias = config.get("bias", True)
        expected = {"linear.weight": shape} | ({"linear.bias": shape[:1]} if use_bias else {})
        for key, want in expected.items():
            if key not in tensors:
                raise ValueError(f"{weights_file} lacks the tensor {key}.")
            if tuple(tensors[key].shape) != want:
                raise ValueError(f"{weights_file}: tensor {key} has shape {tuple(tensors[key].shape)}, which does "
                                 f"not fit {want} from config.json.")
        layers.append({"units": config["out_features"], "in_features": config["in_features"],
                       "activation": DENSE_ACTIVATIONS[activation], "use_bias": use_bias, "config_file": config_file,
                       "kernel": tensors["linear.weight"].T, "bias": tensors.get("linear.bias")})
    return layers


def dense_head(encoder, layers, normalize):
    """A `DenseHead` over `encoder` with the weights of `dense_layers`; raises where the widths do not chain."""
    width = encoder.output_dim
    for layer in layers:
        if layer["in_features"] != width:
            raise ValueError(f"{layer['config_file']} has in_features {layer['in_features']}, but the modules "
                             f"before it give {width}-wide vectors.")
        width = layer["units"]
    head = DenseHead(encoder, [{k: layer[k] for k in ("units", "activation", "use_bias")} for layer in layers],
                     normalize=normalize)
    head.build(TOKEN_SHAPES)
    for keras_layer, layer in zip(head.dense, layers):
        keras_layer.kernel.assign(np.asarray(layer["kernel"], np.float32))
        if layer["use_bias"]:
            keras_layer.bias.assign(np.asarray(layer["bias"], np.float32))
    return head


def named_prompts(directory):
    """`(prompts, default_prompt_name)` of `config_sentence_transformers.json` (`({}, None)` without one); an
    empty prompt stays, as it overrides the default in sentence-transformers."""
    config = read_json(directory, "config_sentence_transformers.json") or {}
    return dict(config.get("prompts") or {}), config.get("default_prompt_name")


def resolve_prompt(directory, prompt):
    """The prompt text for `prompt`: a name from `config_sentence_transformers.json`'s prompts, else the text
    itself; None gives the default prompt (`default_prompt_name`), or none."""
    config = (read_json(directory, "config_sentence_transformers.json") or {}) if directory else {}
    prompts = config.get("prompts") or {}
    if prompt is None:
        name = config.get("default_prompt_name")
        return prompts.get(name, "") if name else ""
    return prompts.get(prompt, prompt)
