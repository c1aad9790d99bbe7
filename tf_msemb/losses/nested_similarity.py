"""Nested similarity: how far the cosines of cut vectors are from the cosines of the whole ones.

The unsupervised objective of Matryoshka-Adaptor (Yoon et al. 2024, EMNLP):
for every width d,
  L_pair(d) = mean_{i != j} |cos(y_i[:d], y_j[:d]) - cos(x_i, x_j)|,
  L_topk(d) = mean_i mean_{j in kNN(i)} |cos(y_i[:d], y_j[:d]) - cos(x_i, x_j)|,
with x the vectors as they are and y the ones transformed, kNN(i) the k
nearest neighbours of x_i by the whole cosine: the first term keeps the
global geometry, the second the neighbourhoods that retrieval and mining
read.
"""

import tensorflow as tf

from tf_msemb.losses.matryoshka import nested_vectors


def cosine_matrix(vectors):
    """`[n, n]` cosines of the rows of `[n, d]` `vectors`."""
    unit = tf.math.l2_normalize(tf.cast(vectors, tf.float32), axis=-1, epsilon=1e-12)
    return tf.matmul(unit, unit, transpose_b=True)


def nested_similarity_loss(reference, vectors, widths, top_k=10):
    """`sum_d L_pair(d) + L_topk(d)` over `widths` (module docstring): `reference` `[n, D]` the whole vectors
    whose cosines are the target, `vectors` `[n, D]` the transformed ones, cut to each width; `top_k` < n."""
    target = cosine_matrix(reference)
    n = tf.shape(target)[0]
    off_diagonal = 1.0 - tf.eye(n)
    # The k nearest of each row, itself aside.
    _, neighbours = tf.math.top_k(target - 2.0 * tf.eye(n), k=top_k)
    nearest = tf.reduce_sum(tf.one_hot(neighbours, n), axis=1)
    total = 0.0
    for width in widths:
        error = tf.abs(cosine_matrix(nested_vectors(vectors, width)) - target)
        pair = tf.reduce_sum(error * off_diagonal) / tf.reduce_sum(off_diagonal)
        local = tf.reduce_sum(error * nearest) / tf.reduce_sum(nearest)
        total += pair + local
    return total
