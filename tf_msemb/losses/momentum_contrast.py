"""InfoNCE against a memory queue (dual momentum contrast, seed 002 Eq. 2).

    L(x, y) = -log exp(h_x . h_y / T) / sum_{i=0..K} exp(h_x . h_{y_i} / T)

`h_y = h_{y_0}` is the translation encoded by the momentum encoder and
`h_{y_1..K}` are the queue's vectors. Inputs: `queries [b, d]` from the base
encoder, `keys [n, d]` from the momentum encoder (this replica's, or gathered
from all replicas with `labels` locating each query's key), `queue [K, d]`;
all L2-normalized. Keys and queue get no gradient. Requirements: `queue_valid`
marks filled slots (an unfilled slot is never a negative).

With `in_batch_negatives` the other keys of the (global) batch are negatives
too, as in in-batch training; the paper uses only the queue.
"""

from keras import ops

from tf_msemb.losses.translation_ranking import softmax_loss_from_cosines


def queue_info_nce(queries, keys, labels, queue, temperature=0.04, queue_valid=None, in_batch_negatives=False):
    """Mean over queries of seed 002 Eq. 2 (`temperature` is T)."""
    keys = ops.stop_gradient(ops.cast(keys, "float32"))
    queue = ops.stop_gradient(ops.cast(queue, "float32"))
    num_keys, queue_size = ops.shape(keys)[0], ops.shape(queue)[0]
    if in_batch_negatives:
        key_mask = ops.ones((ops.shape(queries)[0], num_keys), "bool")
    else:
        key_mask = ops.cast(ops.one_hot(labels, num_keys), "bool")
    if queue_valid is None:
        queue_valid = ops.ones((queue_size,), "bool")
    queue_mask = ops.broadcast_to(ops.cast(queue_valid, "bool")[None, :], (ops.shape(queries)[0], queue_size))
    # Scored block by block: concatenating the candidates would copy the whole queue every step.
    queries = ops.cast(queries, "float32")
    cosine = ops.concatenate([ops.einsum("bd,nd->bn", queries, keys), ops.einsum("bd,kd->bk", queries, queue)], axis=1)
    mask = ops.concatenate([key_mask, queue_mask], axis=1)
    return softmax_loss_from_cosines(cosine, labels, 1.0 / temperature, candidate_mask=mask)


def symmetric_queue_loss(h_x, h_y, key_x, key_y, labels, queue_x, queue_y, temperature=0.04, queue_valid=None,
                         in_batch_negatives=False):
    """`L(x, y) + L(y, x)`: x against y's momentum keys and y-queue, and the reverse."""
    forward = queue_info_nce(h_x, key_y, labels, queue_y, temperature, queue_valid, in_batch_negatives)
    backward = queue_info_nce(h_y, key_x, labels, queue_x, temperature, queue_valid, in_batch_negatives)
    return forward + backward
