"""Loading an exported model and encoding sentences with it."""

import json
import os

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops the export uses)

from tf_msemb.export.model_card import METADATA_FILE
from tf_msemb.export.saved_model import check_loadable
from tf_msemb.export.saved_model import resolve_export


def numbered_exports(model_dir):
    """`[(step, path)]` of a training `model_dir`'s versioned exports `export/<step>`, in step order."""
    export_dir = os.path.join(model_dir, "export")
    names = os.listdir(export_dir) if os.path.isdir(export_dir) else []
    steps = sorted((int(name), os.path.join(export_dir, name)) for name in names
                   if name.isdigit() and os.path.exists(os.path.join(export_dir, name, "saved_model.pb")))
    if not steps:
        raise FileNotFoundError(f"No versioned exports (export/<step>) in {model_dir}.")
    return steps


def best_export(model_dir, steps):
    """`export/best` of a training `model_dir` when the step it holds is none of `steps`, else None."""
    best = os.path.join(model_dir, "export", "best")
    try:
        with open(os.path.join(best, METADATA_FILE), encoding="utf-8") as f:
            step = json.load(f).get("training_step")
    except FileNotFoundError:
        return None
    return None if step in steps else best


def run_exports(model_dir):
    """`[(step, path)]` of a training `model_dir`'s versioned exports in step order, then `("best", path)` when
    `export/best` holds a step that has none (a run evaluated more often than it exported)."""
    exports = numbered_exports(model_dir)
    best = best_export(model_dir, [step for step, _ in exports])
    return exports + ([("best", best)] if best else [])


def load_model(path):
    """Loads an exported model; calling it maps strings to unit vectors. An export this TensorFlow cannot run
    (an int8 one off x86-64) stops first with one line (`check_loadable`)."""
    path = resolve_export(path)
    check_loadable(path)
    return tf.saved_model.load(path)


def encode(model, sentences, batch_size=64, verbose=True):
    """Embeds `sentences` as a float32 `[n, d]` array, in their given order.

    `model` maps a string tensor to vectors (a loaded export, or
    `export.litert.LiteRTModel`).

    Sentences are batched in order of length, so a batch holds sentences of
    similar length and carries little padding.
    """
    sentences = list(sentences)
    order = np.argsort([len(s) for s in sentences], kind="stable")
    chunks = []
    progress = keras.utils.Progbar(len(sentences), unit_name="sentence", verbose=1 if verbose else 0)
    for start in range(0, len(sentences), batch_size):
        batch = [sentences[i] for i in order[start : start + batch_size]]
        chunks.append(np.asarray(model(tf.constant(batch, dtype=tf.string))))
        progress.add(len(batch))
    if not chunks:
        return np.zeros((0, 0), np.float32)
    embeddings = np.empty((len(sentences), chunks[0].shape[1]), np.float32)
    embeddings[order] = np.concatenate(chunks)
    return embeddings


class Memoized:
    """An `embed` that encodes each distinct sentence once, for several evaluators of the same weights.

    Dev sets share sides (the English half of every Multi30k pair, the
    sentences of a retrieval and a distillation set), so one evaluation of a
    run encodes far fewer sentences. Valid for one set of weights only: make
    a new one after every training step.
    """

    def __init__(self, embed):
        self.embed, self.vectors = embed, {}

    def __call__(self, sentences):
        sentences = list(sentences)
        new = [sentence for sentence in dict.fromkeys(sentences) if sentence not in self.vectors]
        if new:
            self.vectors.update(zip(new, self.embed(new)))
        if not sentences:
            return self.embed([])
        return np.stack([self.vectors[sentence] for sentence in sentences])


def nested(embed, width):
    """`embed` whose vectors keep their first `width` dimensions, re-normalized: what an export written with
    `inference_module.output_dim = width` gives (normalizing before the cut changes only the length)."""

    def embed_nested(sentences):
        vectors = embed(sentences)[:, :width]
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    return embed_nested
