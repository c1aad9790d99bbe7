"""A backbone's weights as a Hugging Face transformers checkpoint: `config.json` and `model.safetensors`.

Every backbone this package trains is a stack of keras-hub
`TransformerEncoder` layers (post-LN, as BERT) over token and position
embeddings and a layer norm, so each maps onto one transformers architecture
computing the same function:

- `TransformerBackbone` (from scratch) and keras-hub's `BertBackbone` ->
  `BertModel` (the from-scratch one with one token type, all zeros: it has
  none);
- `DistilBertBackbone` -> `DistilBertModel`;
- `XLMRobertaBackbone` / `RobertaBackbone` -> `XLMRobertaModel` /
  `RobertaModel`: positions start after RoBERTa's two reserved rows, which
  are written as zeros (a padding position is masked out of every attention
  and pooling), and the token type embedding is zero (keras-hub's converter
  folded it into the positions).

Tensors are named as the bare model saves them (`embeddings.*`,
`encoder.layer.*`), as sentence-transformers directories hold them; a
`pooler` the backbone lacks is written as zeros, so transformers loads the
checkpoint without a missing weight (sentence embeddings never read it).
"""

import keras
import keras_hub
import numpy as np

from tf_msemb.models.backbone import TransformerBackbone

# The feed-forward activation (its function's name) -> transformers' `hidden_act`.
ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu"}
# RoBERTa's position ids start at padding_idx + 1 = 2.
ROBERTA_POSITION_OFFSET = 2


def as_array(variable):
    return np.ascontiguousarray(np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable, np.float32))


def _architecture(backbone):
    """`"bert"`, `"distilbert"`, `"xlm-roberta"` or `"roberta"` for the backbone's class, else a ValueError."""
    if isinstance(backbone, (TransformerBackbone, keras_hub.models.BertBackbone)):
        return "bert"
    if isinstance(backbone, keras_hub.models.DistilBertBackbone):
        return "distilbert"
    if isinstance(backbone, keras_hub.models.XLMRobertaBackbone):
        return "xlm-roberta"
    if isinstance(backbone, keras_hub.models.RobertaBackbone):
        return "roberta"
    raise ValueError(f"{type(backbone).__name__} has no transformers equivalent here; written as transformers "
                     "checkpoints: TransformerBackbone, BertBackbone, DistilBertBackbone, RobertaBackbone, "
                     "XLMRobertaBackbone.")


def numerics(backbone):
    """(transformers `hidden_act`, layer-norm epsilon) the backbone computes with; one of each, post-LN."""
    layers = backbone.transformer_layers
    names = {layer._feedforward_intermediate_dense.activation.__name__ for layer in layers}
    epsilons = {float(norm.epsilon) for norm in backbone._flatten_layers(include_self=False)
                if isinstance(norm, keras.layers.LayerNormalization)}
    if any(layer.normalize_first for layer in layers):
        raise ValueError(f"{backbone.name} normalizes before its sublayers (pre-LN); BERT-family checkpoints are "
                         "post-LN.")
    if len(names) != 1 or next(iter(names)) not in ACTIVATIONS:
        raise ValueError(f"{backbone.name} uses the activations {sorted(names)}; transformers checkpoints are "
                         f"written for one of {', '.join(ACTIVATIONS)}.")
    if len(epsilons) != 1:
        raise ValueError(f"{backbone.name} has layer norms of several epsilons {sorted(epsilons)}.")
    return ACTIVATIONS[names.pop()], epsilons.pop()


def _layer_tensors(layer):
    """One transformer layer's tensors in torch's `[out, in]` layout, under BERT's names after `encoder.layer.i.`."""
    attention = layer._self_attention_layer
    width = attention.query_dense.kernel.shape[0]

    def projection(dense):  # Keras [in, heads, head_dim] -> torch [heads * head_dim, in]
        return as_array(dense.kernel).reshape(width, -1).T, as_array(dense.bias).reshape(-1)

    tensors = {}
    for name, dense in (("query", attention.query_dense), ("key", attention.key_dense),
                        ("value", attention.value_dense)):
        tensors[f"attention.self.{name}.weight"], tensors[f"attention.self.{name}.bias"] = projection(dense)
    tensors["attention.output.dense.weight"] = as_array(attention.output_dense.kernel).reshape(-1, width).T
    tensors["attention.output.dense.bias"] = as_array(attention.output_dense.bias)
    norms = (("attention.output.LayerNorm", layer._self_attention_layer_norm),
             ("output.LayerNorm", layer._feedforward_layer_norm))
    for name, norm in norms:
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = as_array(norm.gamma), as_array(norm.beta)
    for name, dense in (("intermediate.dense", layer._feedforward_intermediate_dense),
                        ("output.dense", layer._feedforward_output_dense)):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = as_array(dense.kernel).T, as_array(dense.bias)
    return {key: np.ascontiguousarray(value) for key, value in tensors.items()}


# BERT's names inside a layer -> DistilBERT's.
_DISTILBERT_NAMES = {
    "attention.self.query": "attention.q_lin", "attention.self.key": "attention.k_lin",
    "attention.self.value": "attention.v_lin", "attention.output.dense": "attention.out_lin",
    "attention.output.LayerNorm": "sa_layer_norm", "intermediate.dense": "ffn.lin1", "output.dense": "ffn.lin2",
    "output.LayerNorm": "output_layer_norm",
}


def embedding_tables(backbone):
    """(token table, position table, token type table or None, embedding norm) of the backbone."""
    if hasattr(backbone, "embeddings"):  # TokenAndPositionEmbedding: TransformerBackbone, DistilBERT, RoBERTa
        positions = backbone.embeddings.position_embedding.position_embeddings
        tokens = backbone.embeddings.token_embedding.embeddings
        types = None
    else:  # BertBackbone
        positions = backbone.position_embedding.position_embeddings
        tokens = backbone.token_embedding.embeddings
        types = backbone.segment_embedding.embeddings
    return as_array(tokens), as_array(positions), None if types is None else as_array(types), backbone.embeddings_layer_norm


def transformers_checkpoint(backbone, pad_token_id=0, bos_token_id=None, eos_token_id=None):
    """`(config, tensors)`: `config.json`'s dict and `model.safetensors`' float32 arrays for `backbone`.

    The config carries the backbone's activation and layer-norm epsilon, so
    transformers computes what the backbone computes (`hf_checkpoint` reads
    them back the same way); token ids are the tokenizer's.
    """
    kind = _architecture(backbone)
    activation, epsilon = numerics(backbone)
    tokens, positions, types, norm = embedding_tables(backbone)
    vocabulary, width = tokens.shape
    layers = backbone.transformer_layers
    heads = layers[0]._self_attention_layer.num_heads
    intermediate = layers[0]._feedforward_intermediate_dense.kernel.shape[1]
    dropout = float(getattr(backbone, "dropout", 0.1))
    tensors = {"embeddings.word_embeddings.weight": tokens,
               "embeddings.LayerNorm.weight": as_array(norm.gamma), "embeddings.LayerNorm.bias": as_array(norm.beta)}
    if kind == "distilbert":
        if abs(epsilon - 1e-12) > 1e-15:
            raise ValueError(f"{backbone.name} has layer norm epsilon {epsilon}; DistilBertModel's is fixed at 1e-12.")
        tensors["embeddings.position_embeddings.weight"] = positions
        for i, layer in enumerate(layers):
            for name, value in _layer_tensors(layer).items():
                stem, part = name.rsplit(".", 1)
                tensors[f"transformer.layer.{i}.{_DISTILBERT_NAMES[stem]}.{part}"] = value
        config = {"architectures": ["DistilBertModel"], "model_type": "distilbert", "vocab_size": vocabulary,
                  "dim": width, "n_layers": len(layers), "n_heads": heads, "hidden_dim": intermediate,
                  "activation": activation, "max_position_embeddings": positions.shape[0], "dropout": dropout,
                  "attention_dropout": dropout, "sinusoidal_pos_embds": False, "pad_token_id": pad_token_id}
        return config, tensors
    for i, layer in enumerate(layers):
        tensors.update({f"encoder.layer.{i}.{name}": value for name, value in _layer_tensors(layer).items()})
    pooler = next((layer for layer in backbone.layers if layer.name == "pooled_dense"), None)
    tensors["pooler.dense.weight"] = as_array(pooler.kernel).T.copy() if pooler else np.zeros((width, width), np.float32)
    tensors["pooler.dense.bias"] = as_array(pooler.bias) if pooler else np.zeros((width,), np.float32)
    if kind == "bert":
        types = types if types is not None else np.zeros((1, width), np.float32)
        tensors["embeddings.position_embeddings.weight"] = positions
        tensors["embeddings.token_type_embeddings.weight"] = types
        config = {"architectures": ["BertModel"], "model_type": "bert", "max_position_embeddings": positions.shape[0],
                  "type_vocab_size": types.shape[0], "pad_token_id": pad_token_id}
    else:
        reserved = np.zeros((ROBERTA_POSITION_OFFSET, width), np.float32)
        tensors["embeddings.position_embeddings.weight"] = np.concatenate([reserved, positions])
        tensors["embeddings.token_type_embeddings.weight"] = np.zeros((1, width), np.float32)
        name = "XLMRobertaModel" if kind == "xlm-roberta" else "RobertaModel"
        config = {"architectures": [name], "model_type": kind,
                  "max_position_embeddings": positions.shape[0] + ROBERTA_POSITION_OFFSET, "type_vocab_size": 1,
                  "pad_token_id": pad_token_id}
    config.update({"vocab_size": vocabulary, "hidden_size": width, "num_hidden_layers": len(layers),
                   "num_attention_heads": heads, "intermediate_size": intermediate, "hidden_act": activation,
                   "layer_norm_eps": epsilon, "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout,
                   "position_embedding_type": "absolute"})
    if bos_token_id is not None:
        config["bos_token_id"] = bos_token_id
    if eos_token_id is not None:
        config["eos_token_id"] = eos_token_id
    return config, tensors

