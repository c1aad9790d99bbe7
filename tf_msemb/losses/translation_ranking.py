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


def duplicate_candidates_mask(query_keys, candidate_keys, labels):
    """`[b, n]` bool, False where candidate `j` is another copy of query `i`'s pair: their keys (e.g. the
    source's text) are equal and `j` is not the positive `labels[i]`.

    With one English sentence paired with several languages in a batch,
    `y -> x` would score the identical `x_j` exactly as the positive and
    `x -> y` would push away another translation of the same sentence; seed
    004's loss (Eq. 7-8) is over distinct translation pairs. `query_keys`:
    int `[b]`; `candidate_keys`: int `[n]`, gathered like the candidates.
    """
    same = ops.equal(ops.expand_dims(query_keys, 1), ops.expand_dims(candidate_keys, 0))
    own = ops.cast(ops.one_hot(labels, ops.shape(candidate_keys)[0]), "bool")
    return ops.logical_or(own, ops.logical_not(same))


def forward_ranking_loss(x, y_candidates, labels, scale=20.0, margin=0.0, hard_negatives=None,
                         hard_negative_mask=None, candidate_mask=None):
    """`L(x -> y)` alone: the unidirectional dual encoder (seed 004 Eq. 3 / Eq. 7, Table 1's DE).

    `hard_negatives` (`[m, d]`, e.g. 5 per example, gathered like the
    candidates) are extra targets: target-language sentences that compete
    with `y`. `hard_negative_mask` (bool `[m]`) leaves out those marked
    False (e.g. a negative mined for one pair that is another pair's target:
    it would be a false negative scored exactly as that target).
    `candidate_mask` (bool `[b, n]`, `duplicate_candidates_mask`) leaves out
    in-batch candidates per query.
    """
    n = ops.shape(y_candidates)[0]
    mask = None if candidate_mask is None else ops.cast(candidate_mask, "bool")
    if hard_negatives is not None:
        if hard_negative_mask is not None or mask is not None:
            rows = ops.shape(x)[0]
            in_batch = ops.ones([rows, n], "bool") if mask is None else mask
            extra = (ops.ones([rows, ops.shape(hard_negatives)[0]], "bool") if hard_negative_mask is None
                     else ops.broadcast_to(ops.cast(hard_negative_mask, "bool")[None, :],
                                           [rows, ops.shape(hard_negatives)[0]]))
            mask = ops.concatenate([in_batch, extra], axis=1)
        y_candidates = ops.concatenate([y_candidates, ops.cast(hard_negatives, y_candidates.dtype)], axis=0)
    return in_batch_softmax_loss(x, y_candidates, labels, scale, margin, candidate_mask=mask)


def bidirectional_ranking_loss(x, y, x_candidates, y_candidates, labels, scale=20.0, margin=0.0, hard_negatives=None,
                               hard_negative_mask=None, candidate_mask=None):
    """`L(x -> y) + L(y -> x)`: each side ranks the other side's candidates (seed 004 Eq. 5 / Eq. 8).

    `hard_negatives` (and their `hard_negative_mask`) join the `x -> y`
    direction only (`forward_ranking_loss`): they are target-language
    sentences, so they are not candidates for `y -> x`. `candidate_mask`
    (bool `[b, n]`) leaves the same in-batch candidates out of both
    directions: pair `j` is no negative for pair `i` either way.
    """
    forward = forward_ranking_loss(x, y_candidates, labels, scale, margin, hard_negatives, hard_negative_mask,
                                   candidate_mask)
    backward = in_batch_softmax_loss(y, x_candidates, labels, scale, margin, candidate_mask=candidate_mask)
    return forward + backward
