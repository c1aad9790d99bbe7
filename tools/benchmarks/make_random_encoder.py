"""A random-weight BERT of any size with a real checkpoint's tokenizer: a large encoder for speed and memory figures.

    python tools/benchmarks/make_random_encoder.py --template=runs/e5-small --output=runs/bert768-random \
        --hidden_size=768 --layers=12 --heads=12 --intermediate_size=3072

Copies the template (a sentence-transformers directory of a BERT
architecture: tokenizer, modules, pooling, prompts), writes `config.json`
with the new sizes and `model.safetensors` with BERT's initialization
(normal with `initializer_range` for every matrix and embedding, layer-norm
scales 1, biases 0; seeded), and sets the pooling's dimension to the new
width. The vocabulary, positions and token types stay the template's, so
multilingual-e5-small as the template gives a 12-layer, 768-wide BERT over
XLM-R's 250K pieces (the shape of e5-base or LaBSE). Both this package and
sentence-transformers load the result; its vectors mean nothing, so use it
for `bench_train.py` and `bench_encode.py`, not for quality.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import json
import os
import shutil

import numpy as np
from absl import flags
from safetensors.numpy import load_file
from safetensors.numpy import save_file

flags.DEFINE_string("template", None, "sentence-transformers directory of a BERT checkpoint whose tokenizer, "
                    "vocabulary size and modules the new model keeps.")
flags.DEFINE_string("output", None, "Directory to write (must not exist).")
flags.DEFINE_integer("hidden_size", 768, "Width of the new model.")
flags.DEFINE_integer("layers", 12, "Transformer layers.")
flags.DEFINE_integer("heads", 12, "Attention heads (must divide --hidden_size).")
flags.DEFINE_integer("intermediate_size", 3072, "Width of each layer's feed-forward block.")
flags.DEFINE_integer("seed", 0, "Seed of the random weights.")
flags.mark_flags_as_required(["template", "output"])
FLAGS = flags.FLAGS

CONFIG = "config.json"
WEIGHTS = "model.safetensors"


def bert_shapes(config, prefix, pooler):
    """Name -> shape of every tensor of a Hugging Face `BertModel` with `config`, names under `prefix`."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    shapes = {
        "embeddings.word_embeddings.weight": (config["vocab_size"], hidden),
        "embeddings.position_embeddings.weight": (config["max_position_embeddings"], hidden),
        "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], hidden),
        "embeddings.LayerNorm.weight": (hidden,),
        "embeddings.LayerNorm.bias": (hidden,),
    }
    for i in range(config["num_hidden_layers"]):
        layer = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes[layer + name + ".weight"] = (hidden, hidden)
            shapes[layer + name + ".bias"] = (hidden,)
        shapes[layer + "intermediate.dense.weight"] = (inner, hidden)
        shapes[layer + "intermediate.dense.bias"] = (inner,)
        shapes[layer + "output.dense.weight"] = (hidden, inner)
        shapes[layer + "output.dense.bias"] = (hidden,)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[layer + norm + ".weight"] = (hidden,)
            shapes[layer + norm + ".bias"] = (hidden,)
    if pooler:
        shapes["pooler.dense.weight"] = (hidden, hidden)
        shapes["pooler.dense.bias"] = (hidden,)
    return {prefix + name: shape for name, shape in shapes.items()}


def random_weights(shapes, initializer_range, seed):
    """BERT's initialization of every tensor in `shapes`, as float32."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith("LayerNorm.weight"):
            tensors[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            tensors[name] = np.zeros(shape, np.float32)
        else:
            tensors[name] = rng.standard_normal(shape, np.float32) * np.float32(initializer_range)
    return tensors


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_json(path, content):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(content, f, indent=1)


def make_random_encoder(template, output, hidden_size, layers, heads, intermediate_size, seed=0):
    """Writes the random BERT described in the module docstring to `output`; returns its config."""
    config_file = os.path.join(template, CONFIG)
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"{config_file} not found: --template must be a checkpoint directory.")
    config = _read_json(config_file)
    if config.get("model_type") != "bert":
        raise ValueError(f"{config_file} has model_type {config.get('model_type')!r}; --template must be a BERT "
                         "checkpoint (e.g. multilingual-e5-small).")
    if hidden_size % heads:
        raise ValueError(f"--heads={heads} does not divide --hidden_size={hidden_size}.")
    if os.path.exists(output):
        raise ValueError(f"{output} exists; give --output a new directory.")
    dense = [entry["path"] for entry in _read_json(os.path.join(template, "modules.json"))
             if entry["type"].endswith("Dense")]
    if dense:
        raise ValueError(f"{template} has a Dense module ({dense[0]}) whose input width would no longer match; "
                         "use a template without one.")
    names = load_file(os.path.join(template, WEIGHTS)).keys()
    word = next((name for name in names if name.endswith("embeddings.word_embeddings.weight")), None)
    if word is None:
        raise ValueError(f"{os.path.join(template, WEIGHTS)} has no embeddings.word_embeddings.weight.")
    prefix = word[: -len("embeddings.word_embeddings.weight")]
    pooler = any(name.startswith(prefix + "pooler.") for name in names)

    shutil.copytree(template, output, ignore=shutil.ignore_patterns(WEIGHTS))
    config.update(hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=intermediate_size)
    _write_json(os.path.join(output, CONFIG), config)
    shapes = bert_shapes(config, prefix, pooler)
    save_file(random_weights(shapes, config.get("initializer_range", 0.02), seed), os.path.join(output, WEIGHTS),
              metadata={"format": "pt"})
    for modules_entry in _read_json(os.path.join(output, "modules.json")):
        pooling_file = os.path.join(output, modules_entry["path"], CONFIG)
        if modules_entry["type"].endswith("Pooling") and os.path.isfile(pooling_file):
            pooling = _read_json(pooling_file)
            key = "embedding_dimension" if "embedding_dimension" in pooling else "word_embedding_dimension"
            _write_json(pooling_file, pooling | {key: hidden_size})
    return config


def main(argv):
    del argv
    config = make_random_encoder(FLAGS.template, FLAGS.output, FLAGS.hidden_size, FLAGS.layers, FLAGS.heads,
                                 FLAGS.intermediate_size, FLAGS.seed)
    parameters = sum(np.prod(shape) for shape in bert_shapes(config, "", False).values())
    print(f"{FLAGS.output}: random BERT, {config['num_hidden_layers']} layers, {config['hidden_size']} wide, "
          f"{config['vocab_size']:,} pieces, {parameters / 1e6:.0f}M parameters")


if __name__ == "__main__":
    cli.run(main)
