"""The tiny Hugging Face checkpoints of tests/fixtures/pretrained, and wider copies of them for width tests."""

import json
import os
import shutil

import numpy as np

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "pretrained")
NAMES = ["bert_wordpiece_uncased", "bert_wordpiece_cased", "distilbert", "bert_sentencepiece", "xlm_roberta",
         "roberta"]


def load_reference(name):
    """The reference file of fixture `name`: its sentences, token ids and vectors from sentence-transformers."""
    with open(os.path.join(FIXTURES, f"{name}_reference.json"), encoding="utf-8") as f:
        return json.load(f)


def checkpoint(name):
    """The directory of the tiny checkpoint `name` (all are 32 wide)."""
    return os.path.join(FIXTURES, name)


def widened(name, target, width, seed=0):
    """A copy of checkpoint `name` in `target` with hidden size `width` and fresh random weights; returns it.

    Every axis of the checkpoint's width (32) becomes `width`; the tokenizer
    files stay, so it tokenizes as the original does.
    """
    from safetensors.numpy import load_file
    from safetensors.numpy import save_file

    shutil.copytree(checkpoint(name), target)
    config_file = os.path.join(target, "config.json")
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)
    key = "dim" if config["model_type"] == "distilbert" else "hidden_size"
    old = config[key]
    config[key] = width
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(config, f)
    rng = np.random.default_rng(seed)
    weights_file = os.path.join(target, "model.safetensors")
    tensors = {}
    for tensor_name, tensor in load_file(weights_file).items():
        shape = tuple(width if size == old else size for size in tensor.shape)
        values = rng.normal(0.0, 0.2, shape).astype(np.float32)
        tensors[tensor_name] = values + 1.0 if "LayerNorm.weight" in tensor_name else values
    save_file(tensors, weights_file, metadata={"format": "pt"})
    return str(target)
