"""In-batch translation ranking: find each sentence's translation among the batch.

Inputs are L2-normalized embeddings, so `q . c` is the cosine. Queries are this
replica's rows; candidates may be gathered from every replica, and `labels`
then index each query's positive in the gathered candidates.

Reference: Yang et al. 2019 (bidirectional dual encoder, seed 004 Eq. 1-3);
with `margin > 0` this is the additive margin softmax of seed 004 Eq. 4-5.
"""

from keras import ops


def in_batch_softmax_loss(queries, candidates, labels, scale=20.0, margin=0.0):
    """Mean cross-entropy of picking `candidates[labels[i]]` for `queries[i]`.

    Args:
        queries: `[b, d]`.
        candidates: `[n, d]`, `n >= b`.
        labels: int `[b]`, the positive of each query in `candidates`.
        scale: logits are `scale * cos` (i.e. `1 / temperature`).
        margin: subtracted from the positive's cosine before scaling.
    """
    cosine = ops.matmul(ops.cast(queries, "float32"), ops.transpose(ops.cast(candidates, "float32")))
    positive = ops.one_hot(labels, ops.shape(candidates)[0], dtype="float32")
    logits = scale * (cosine - margin * positive)
    losses = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return ops.mean(losses)


def bidirectional_ranking_loss(x, y, x_candidates, y_candidates, labels, scale=20.0, margin=0.0):
    """`L(x -> y) + L(y -> x)`: each side ranks the other side's candidates."""
    forward = in_batch_softmax_loss(x, y_candidates, labels, scale, margin)
    backward = in_batch_softmax_loss(y, x_candidates, labels, scale, margin)
    return forward + backward
