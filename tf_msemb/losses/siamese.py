"""Siamese losses on labeled sentence pairs (SBERT; seed 000 stage 1, Sec. 5.1)."""

from keras import ops


def cosine_similarity(u, v):
    u, v = ops.cast(u, "float32"), ops.cast(v, "float32")
    norms = ops.sqrt(ops.sum(u * u, axis=-1) * ops.sum(v * v, axis=-1))
    return ops.sum(u * v, axis=-1) / ops.maximum(norms, 1e-12)


def cosine_mse_loss(u, v, gold):
    """`mean((cos(u_i, v_i) - gold_i)^2)`, gold scaled to [0, 1] (STS-b regression)."""
    return ops.mean(ops.square(cosine_similarity(u, v) - ops.cast(gold, "float32")))


def cosent_loss(u, v, gold, scale=20.0):
    """CoSENT: `log(1 + sum_{(i, j): gold_i > gold_j} exp(scale (cos_j - cos_i)))` over the batch's pairs.

    Asks only that pairs scored higher have the higher cosine, never for a
    cosine's level, so a pretrained space whose cosines are crowded keeps
    its scale while its order is fitted (multilingual-e5-small gives STS-b
    dev's English pairs a mean cosine of 0.89 where `cosine_mse_loss` asks
    for their mean score, 0.47).
    """
    cos = cosine_similarity(u, v) * scale
    gold = ops.cast(gold, "float32")
    ordered = ops.expand_dims(gold, 1) > ops.expand_dims(gold, 0)  # [i, j]: gold_i > gold_j
    differences = ops.expand_dims(cos, 0) - ops.expand_dims(cos, 1)  # [i, j]: cos_j - cos_i
    terms = ops.where(ordered, differences, ops.full_like(differences, -1e9))
    return ops.logsumexp(ops.concatenate([ops.zeros((1,)), ops.reshape(terms, (-1,))]))


def pair_features(u, v):
    """`(u, v, |u - v|)`, the classifier input of SBERT's NLI objective."""
    return ops.concatenate([u, v, ops.abs(u - v)], axis=-1)


def nli_softmax_loss(logits, labels):
    """Mean cross-entropy of the 3-way NLI classifier on `pair_features`."""
    return ops.mean(ops.sparse_categorical_crossentropy(ops.cast(labels, "int32"), logits, from_logits=True))
