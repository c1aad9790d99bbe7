"""Cross-lingual token-level reconstruction (XTR, EMS, seed 003 Sec. III-B).

From the sentence embedding of `S_l` (and the target language), a head
predicts the bag of tokens of its translation `S_l'`:

    p(S_l')_w = N_w / ||S_l'||   (Eq. 7: count of w over the sentence's length)
    L_XTR = sum over the batch of KL(p(S_l') || q(S_l)) + KL(p(S_l) || q(S_l'))   (Eq. 6)

Inputs: `token_ids [b, L]` with `padding_mask [b, L]` (ids listed in
`ignore_ids`, the tokenizer's pad/begin/end, are not part of the bag;
`<unk>` is a token like any other), and the head's `logits [b, V]`.
"""

from keras import ops


def bag_of_tokens(token_ids, padding_mask, vocabulary_size, ignore_ids=()):
    """Normalized token counts `[b, V]` of each row's real (non-ignored) tokens.

    Counted by one segment sum over `row * V + id`, so memory is `O(b V)`,
    never `O(b L V)` as a one-hot would take. A row with no counted token
    gets all zeros (it then adds nothing to the KL).
    """
    token_ids = ops.cast(token_ids, "int32")
    keep = ops.cast(padding_mask, "bool")
    for token in ignore_ids:
        keep = ops.logical_and(keep, ops.not_equal(token_ids, token))
    rows = ops.shape(token_ids)[0]
    segments = ops.arange(rows, dtype="int32")[:, None] * vocabulary_size + token_ids
    counts = ops.segment_sum(ops.reshape(ops.cast(keep, "float32"), (-1,)), ops.reshape(segments, (-1,)),
                             num_segments=rows * vocabulary_size)
    counts = ops.reshape(counts, (-1, vocabulary_size))
    return counts / ops.maximum(ops.sum(counts, axis=-1, keepdims=True), 1.0)


def xtr_kl(target, logits):
    """Mean over rows of `KL(target || softmax(logits))`, with `0 log 0 = 0`."""
    target = ops.stop_gradient(ops.cast(target, "float32"))
    log_q = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    log_p = ops.log(ops.where(target > 0, target, 1.0))
    return ops.mean(ops.sum(target * (log_p - log_q), axis=-1))


def bidirectional_xtr_loss(bag_src, bag_tgt, logits_src, logits_tgt):
    """`KL(p(S_l') || q(S_l)) + KL(p(S_l) || q(S_l'))` (Eq. 6), each a mean over the batch (Eq. 12's `1/|B|`).

    `logits_src` are predicted from the source embedding (with the target
    language), so they are scored against the target's bag, and the reverse.
    """
    return xtr_kl(bag_tgt, logits_src) + xtr_kl(bag_src, logits_tgt)
