"""Embedding length penalty (seed 004 Sec. 4.2, footnote 3): `lambda * ||e||_2`, averaged over the batch.

Input: unnormalized embeddings `[b, d]`. With seed 004's dot-product scoring
the ranking loss sees these raw vectors, and the penalty bounds the norms its
scores grow by. With cosine scoring it changes no score, and no score holds
the norms up against it: it only shrinks them, and the gradient through the
normalization grows as `1 / ||e||`. So it belongs to dot scoring alone.
"""

from keras import ops


def embedding_length_penalty(embeddings, weight):
    """`weight * mean_i ||embeddings_i||_2`."""
    norms = ops.sqrt(ops.sum(ops.square(ops.cast(embeddings, "float32")), axis=-1))
    return weight * ops.mean(norms)
