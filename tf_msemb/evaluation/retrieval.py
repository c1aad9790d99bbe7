"""Tatoeba-style translation retrieval between two line-aligned sets."""

import numpy as np


def translation_accuracy(src_embeddings, tgt_embeddings):
    """Nearest neighbour by cosine in the other language, both directions.

    Row i of each array is the i-th sentence of an aligned pair (unit vectors).
    Returns accuracies `src->tgt`, `tgt->src` and their `mean`, in [0, 1].
    """
    if src_embeddings.shape != tgt_embeddings.shape:
        raise ValueError(
            f"Aligned sets must have equal shapes, got {src_embeddings.shape} and {tgt_embeddings.shape}."
        )
    similarity = src_embeddings @ tgt_embeddings.T
    gold = np.arange(len(similarity))
    forward = float(np.mean(np.argmax(similarity, axis=1) == gold))
    backward = float(np.mean(np.argmax(similarity, axis=0) == gold))
    return {"src->tgt": forward, "tgt->src": backward, "mean": (forward + backward) / 2}
