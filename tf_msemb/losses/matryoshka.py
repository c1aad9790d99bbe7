"""Matryoshka representation learning: one loss over nested prefixes of the sentence vectors (Kusupati et al. 2022).

`L_MRL = sum_d w_d L(normalize(v[:, :d]))` for each width d of a list: the
first d dimensions of every vector, re-normalized, are trained to work on
their own, so a vector can be cut to d at inference (`nested_vectors`) and
keep most of its quality.
"""

import tensorflow as tf


def nested_vectors(vectors, width):
    """The first `width` dimensions of each row of `[n, d]` `vectors`, re-normalized to unit length."""
    return tf.math.l2_normalize(tf.cast(vectors[..., :width], tf.float32), axis=-1, epsilon=1e-12)


def check_widths(widths, weights, full_width):
    """The widths (descending, each at most `full_width`) and their weights (default 1 each); raises on bad ones."""
    widths = [int(width) for width in widths]
    weights = [1.0] * len(widths) if weights is None else [float(weight) for weight in weights]
    if not widths or len(weights) != len(widths):
        raise ValueError(f"Matryoshka widths {widths} need one weight each; got {weights}.")
    if any(not 0 < width <= full_width for width in widths) or len(set(widths)) != len(widths):
        raise ValueError(f"Matryoshka widths {widths} must be distinct and within the vectors' {full_width} "
                         "dimensions.")
    order = sorted(range(len(widths)), key=lambda i: -widths[i])
    return [widths[i] for i in order], [weights[i] for i in order]


def matryoshka_loss(loss_of, embeddings, widths, weights):
    """`sum_d w_d loss_of({name: nested_vectors(v, d)})["loss"]` over `widths`; other values from the widest.

    `loss_of` maps `{name: [n, d] vectors}` to `{"loss": ..., other values}`;
    every vector of `embeddings` is cut to each width.
    """
    results = None
    total = 0.0
    for width, weight in zip(widths, weights):
        at_width = loss_of({name: nested_vectors(vectors, width) for name, vectors in embeddings.items()})
        total += weight * at_width["loss"]
        if results is None:
            results = at_width
    return {**results, "loss": total}


def describe_widths(matryoshka):
    """`{"widths", "weights"}` of `check_widths`' result (what export metadata records), or None."""
    return None if matryoshka is None else {"widths": matryoshka[0], "weights": matryoshka[1]}
