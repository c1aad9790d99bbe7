"""keras-hub backbones from local Hugging Face checkpoints, computing what the checkpoint's own model computes.

keras-hub's converters map the weights; this module builds the backbone
from `config.json` itself so that the numerics follow the config, not
keras-hub's defaults:

- the feed-forward activation (`hidden_act`): keras-hub's BERT always uses
  tanh-approximated GELU, BERT checkpoints mostly exact GELU;
- the layer-norm epsilon (`layer_norm_eps`): keras-hub's RoBERTa always uses
  1e-5, BERT and DistilBERT 1e-12;
- RoBERTa weights saved without the `roberta.` prefix (sentence-transformers
  directories) and RoBERTa's token-type embedding, both as keras-hub's
  XLM-R converter handles them (the architectures are the same).

Weights load through a loader that names the tensor whose shape does not
match the config. The subclasses below keep these settings in their config,
so clones (`from_config`) compute the same.

The converters, the safetensors loader and the tanh GELU live in
`keras_hub.src`, which is not public API: `load_backbone` imports them
(`_keras_hub_internals`), not every import of the package (training runs
import this module through `pretrained`), and a keras-hub release without
them fails the load with the module named and the release this module was
checked against.
"""

import json
import os

import keras
import keras_hub

# The keras-hub releases whose private modules this module was checked against (pyproject.toml's pin).
KERAS_HUB_PIN = "keras-hub>=0.32,<0.33"
# Hugging Face `hidden_act` -> Keras activation ("gelu_approximate": keras-hub's tanh GELU, `_keras_hub_internals`).
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "relu": "relu",
}


class _ConfigNumerics:
    """Sets the feed-forward activation and every layer norm's epsilon after the backbone is built.

    Both are read at call time (Keras' `Dense` and `LayerNormalization`), so
    changing them on the built layers changes the computation.
    """

    def __init__(self, *args, hidden_activation=None, layer_norm_epsilon=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.hidden_activation = hidden_activation
        self.layer_norm_epsilon = layer_norm_epsilon
        if hidden_activation is not None:
            activation = keras.activations.get(hidden_activation)
            for layer in self.transformer_layers:
                layer.activation = activation
                layer._feedforward_intermediate_dense.activation = activation
        if layer_norm_epsilon is not None:
            for layer in self._flatten_layers(include_self=False):
                if isinstance(layer, keras.layers.LayerNormalization):
                    layer.epsilon = layer_norm_epsilon

    def get_config(self):
        config = super().get_config()
        config.update(hidden_activation=keras.activations.serialize(keras.activations.get(self.hidden_activation))
                      if self.hidden_activation is not None else None,
                      layer_norm_epsilon=self.layer_norm_epsilon)
        return config


@keras.saving.register_keras_serializable(package="tf_msemb")
class HFBertBackbone(_ConfigNumerics, keras_hub.models.BertBackbone):
    """`BertBackbone` with the checkpoint's activation and layer-norm epsilon."""


@keras.saving.register_keras_serializable(package="tf_msemb")
class HFDistilBertBackbone(_ConfigNumerics, keras_hub.models.DistilBertBackbone):
    """`DistilBertBackbone` with the checkpoint's activation and layer-norm epsilon."""


@keras.saving.register_keras_serializable(package="tf_msemb")
class HFRobertaBackbone(_ConfigNumerics, keras_hub.models.RobertaBackbone):
    """`RobertaBackbone` with the checkpoint's activation and layer-norm epsilon."""


@keras.saving.register_keras_serializable(package="tf_msemb")
class HFXLMRobertaBackbone(_ConfigNumerics, keras_hub.models.XLMRobertaBackbone):
    """`XLMRobertaBackbone` with the checkpoint's activation and layer-norm epsilon."""


# model_type -> (backbone class, keras-hub converter module in `_keras_hub_internals`).
ARCHITECTURES = {
    "bert": (HFBertBackbone, "convert_bert"),
    "distilbert": (HFDistilBertBackbone, "convert_distilbert"),
    "roberta": (HFRobertaBackbone, "convert_xlm_roberta"),
    "xlm-roberta": (HFXLMRobertaBackbone, "convert_xlm_roberta"),
}
WEIGHTS_FILE = "model.safetensors"


def read_config(directory):
    """`config.json` of a checkpoint directory; its model_type must be one of `ARCHITECTURES`."""
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: a Hugging Face checkpoint directory needs its config.json.")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(f"{path} has model_type {model_type!r}; supported: {', '.join(sorted(ARCHITECTURES))}.")
    return config


def _numerics(config, path, internals):
    """(Keras activation, layer-norm epsilon) as the checkpoint's model computes."""
    key = "activation" if config["model_type"] == "distilbert" else "hidden_act"
    name = config.get(key, "gelu")
    if name not in ACTIVATIONS:
        raise ValueError(f"{path} has {key} {name!r}; supported: {', '.join(ACTIVATIONS)}.")
    activation = internals.get(ACTIVATIONS[name], ACTIVATIONS[name])
    # DistilBERT has no such entry: its layer norms use 1e-12.
    return activation, float(config.get("layer_norm_eps", 1e-12))


# Prefixes keras-hub's converters expect that a bare model (as sentence-transformers saves it) lacks.
_MODEL_PREFIXES = ("distilbert.", "roberta.")


class _NamingLoader:
    """Mixed into keras-hub's safetensors loader (`_keras_hub_internals`): names the tensor a mismatch is about
    (and skips a missing pooler).

    It also finds `distilbert.x` saved as plain `x` (keras-hub's DistilBERT
    converter expects the prefix of a full model checkpoint).
    """

    def get_tensor(self, hf_weight_key):
        try:
            return super().get_tensor(hf_weight_key)
        except Exception:
            prefix = next((p for p in _MODEL_PREFIXES if hf_weight_key.startswith(p)), None)
            if prefix is None:
                raise
            return super().get_tensor(hf_weight_key[len(prefix):])

    def port_weight(self, keras_variable, hf_weight_key, hook_fn=None):
        path = os.path.join(self.preset, WEIGHTS_FILE)
        try:
            tensor = self.get_tensor(hf_weight_key)
        except Exception:
            if hf_weight_key.startswith("pooler."):
                return  # BERT's pooler is unused by sentence embeddings (and frozen).
            raise ValueError(f"{path} lacks the tensor {hf_weight_key}.") from None
        expected = tuple(keras_variable.shape)
        try:
            if hook_fn:
                tensor = hook_fn(tensor, list(expected))
        except ValueError:
            raise ValueError(f"{path}: tensor {hf_weight_key} has shape {tuple(self.get_tensor(hf_weight_key).shape)},"
                             f" which does not fit {expected} from config.json.") from None
        if tuple(tensor.shape) != expected:
            raise ValueError(f"{path}: tensor {hf_weight_key} has shape {tuple(self.get_tensor(hf_weight_key).shape)},"
                             f" which does not fit {expected} from config.json.")
        keras_variable.assign(tensor)


def _keras_hub_internals():
    """keras-hub's private converters, loader (with `_NamingLoader` mixed in) and tanh GELU, by name.

    Imported here, by each checkpoint load, so that a keras-hub release that
    moved them breaks only loads, with an error that says so.
    """
    try:
        from keras_hub.src.utils.keras_utils import gelu_approximate
        from keras_hub.src.utils.transformers import convert_bert
        from keras_hub.src.utils.transformers import convert_distilbert
        from keras_hub.src.utils.transformers import convert_xlm_roberta
        from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader
    except ImportError as e:
        raise ImportError(
            f"Loading a Hugging Face checkpoint needs keras-hub's private module {e.name}, which keras-hub "
            f"{keras_hub.__version__} does not provide ({e}); install the release tf_msemb was checked against: "
            f"pip install '{KERAS_HUB_PIN}'.") from e
    return {
        "gelu_approximate": gelu_approximate,
        "convert_bert": convert_bert,
        "convert_distilbert": convert_distilbert,
        "convert_xlm_roberta": convert_xlm_roberta,
        "loader": type("NamingSafetensorLoader", (_NamingLoader, SafetensorLoader), {}),
    }


def load_backbone(directory, config=None):
    """The backbone of a local Hugging Face checkpoint (`config.json` + `model.safetensors`), weights loaded."""
    config = config or read_config(directory)
    if not os.path.exists(os.path.join(directory, WEIGHTS_FILE)):
        raise FileNotFoundError(f"{os.path.join(directory, WEIGHTS_FILE)} not found (only safetensors weights "
                                "are read; save the model with safe_serialization=True).")
    internals = _keras_hub_internals()
    backbone_class, converter_name = ARCHITECTURES[config["model_type"]]
    converter = internals[converter_name]
    activation, epsilon = _numerics(config, os.path.join(directory, "config.json"), internals)
    arguments = converter.convert_backbone_config(config)
    if config["model_type"] == "bert":  # keras-hub's converter leaves BertBackbone's 2 token types as they are
        arguments["num_segments"] = config.get("type_vocab_size", 2)
    backbone = backbone_class(**arguments, hidden_activation=activation, layer_norm_epsilon=epsilon)
    with internals["loader"](directory) as loader:
        converter.convert_weights(backbone, loader, config)
    return backbone
