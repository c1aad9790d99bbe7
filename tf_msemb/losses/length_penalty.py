"""Embedding length penalty (seed 004 Sec. 4.2, footnote 3): `lambda * ||e||_2`, averaged over the batch.

Input: unnormalized embeddings `[b, d]` (before L2 normalization, which the
ranking loss sees). Keeps the raw vectors from growing so that dot-product
uses of the model stay close to its cosine behaviour.
"""

from keras import ops


def embedding_length_penalty(embeddings, weight):
    """`weight * mean_i ||embeddings_i||_2`."""
    norms = ops.sqrt(ops.sum(ops.square(ops.cast(embeddings, "float32")), axis=-1))
    return weight * ops.mean(norms)
