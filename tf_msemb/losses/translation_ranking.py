"""In-batch translation ranking: find each sentence's translation among candidates.

The score is the dot product `phi(q, c) = q . c` of the embeddings given:
L2-normalized ones make it the cosine (then `scale` sets the temperature,
LaBSE-style); raw ones make it seed 004's dot-product scoring (Sec. 3.1,
`scale = 1`; unnormalized, as its footnote 3's length penalty implies). Queries are this replica's rows; candidates may be gathered
from every replica (and extended by hard negatives or a memory queue), and
`labels` index each query's positive in the candidates.

One function covers the family: with `margin = 0` and `scale = 1 / T` it is
InfoNCE (seed 003's contrastive loss, T = 0.1; seed 002 Eq. 2 with a queue)
and seed 004 Eq. 3 (its bidirectional form Eq. 4-5); with `margin > 0` it is
the additive margin softmax (AMS) of seed 004 Eq. 6-7, bidirectional Eq. 8.
The margin is subtracted from the positive's score before scaling:
`scale * (phi - m)`. Seed 004's Eqs. 4 and 7 print no log; the loss is the
negative log-likelihood of Eq. 3, as the equations' own derivation means.

Requirements: `labels[i] < n`; every query keeps at least its positive
candidate unmasked.
"""

from keras import ops

MASKED_LOGIT = -1e9


def in_batch_softmax_loss(queries, candidates, labels, scale=20.0, margin=0.0, candidate_mask=None):
    """Mean cross-entropy of picking `candidates[labels[i]]` for `queries[i]`.

    Args:
        queries: `[b, d]`.
        candidates: `[n, d]`, `n >= b`.
        labels: int `[b]`, the positive of each query in `candidates`.
        scale: logits are `scale * phi` (i.e. `1 / temperature`).
        margin: subtracted from the positive's score before scaling.
        candidate_mask: optional bool `[n]` or `[b, n]`; False candidates are
            left out of the softmax (unfilled queue slots, duplicates).
    """
    scores = ops.matmul(ops.cast(queries, "float32"), ops.transpose(ops.cast(candidates, "float32")))
    return softmax_loss_from_cosines(scores, labels, scale, margin, candidate_mask)


def softmax_loss_from_cosines(cosine, labels, scale=20.0, margin=0.0, candidate_mask=None):
    """`in_batch_softmax_loss` from precomputed `[b, n]` cosines (e.g. blocks scored separately)."""
    positive = ops.one_hot(labels, ops.shape(cosine)[1], dtype="float32")
    logits = scale * (cosine - margin * positive)
    if candidate_mask is not None:
        mask = ops.broadcast_to(ops.cast(candidate_mask, "bool"), ops.shape(logits))
        logits = ops.where(mask, logits, MASKED_LOGIT)
    losses = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return ops.mean(losses)


def forward_ranking_loss(x, y_candidates, labels, scale=20.0, margin=0.0, hard_negatives=None,
                         hard_negative_mask=None):
    """`L(x -> y)` alone: the unidirectional dual encoder (seed 004 Eq. 3 / Eq. 7, Table 1's DE).

    `hard_negatives` (`[m, d]`, e.g. 5 per example, gathered like the
    candidates) are extra targets: target-language sentences that compete
    with `y`. `hard_negative_mask` (bool `[m]`) leaves out those marked
    False (e.g. a negative mined for one pair that is another pair's target:
    it would be a false negative scored exactly as that target).
    """
    mask = None
    if hard_negatives is not None:
        if hard_negative_mask is not None:
            mask = ops.concatenate([ops.ones([ops.shape(y_candidates)[0]], "bool"),
                                    ops.cast(hard_negative_mask, "bool")], axis=0)
        y_candidates = ops.concatenate([y_candidates, ops.cast(hard_negatives, y_candidates.dtype)], axis=0)
    return in_batch_softmax_loss(x, y_candidates, labels, scale, margin, candidate_mask=mask)


def bidirectional_ranking_loss(x, y, x_candidates, y_candidates, labels, scale=20.0, margin=0.0, hard_negatives=None,
                               hard_negative_mask=None):
    """`L(x -> y) + L(y -> x)`: each side ranks the other side's candidates (seed 004 Eq. 5 / Eq. 8).

    `hard_negatives` (and their `hard_negative_mask`) join the `x -> y`
    direction only (`forward_ranking_loss`): they are target-language
    sentences, so they are not candidates for `y -> x`.
    """
    forward = forward_ranking_loss(x, y_candidates, labels, scale, margin, hard_negatives, hard_negative_mask)
    backward = in_batch_softmax_loss(y, x_candidates, labels, scale, margin)
    return forward + backward
