"""Cross-lingual token-level reconstruction (XTR, EMS, seed 003 Sec. 3).

From the sentence embedding of `S_l` (and the target language), a head
predicts the bag of tokens of its translation `S_l'`:

    p(S_l')_w = count of w in S_l' / length   (target distribution)
    L_XTR = sum over the batch of KL(p(S_l') || q(S_l)) + KL(p(S_l) || q(S_l'))

Inputs: `token_ids [b, L]` with `padding_mask [b, L]` (special tokens listed
in `ignore_ids` are not part of the bag), and the head's `logits [b, V]`.
"""

from keras import ops


def bag_of_tokens(token_ids, padding_mask, vocabulary_size, ignore_ids=()):
    """Normalized token counts `[b, V]` of each row's real (non-ignored) tokens.

    A row with no counted token gets all zeros (it then adds nothing to the KL).
    """
    keep = ops.cast(padding_mask, "float32")
    for token in ignore_ids:
        keep = keep * ops.cast(ops.not_equal(token_ids, token), "float32")
    counts = ops.sum(ops.one_hot(token_ids, vocabulary_size, dtype="float32") * keep[..., None], axis=1)
    return counts / ops.maximum(ops.sum(counts, axis=-1, keepdims=True), 1.0)


def xtr_kl(target, logits):
    """Mean over rows of `KL(target || softmax(logits))`, with `0 log 0 = 0`."""
    target = ops.stop_gradient(ops.cast(target, "float32"))
    log_q = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    log_p = ops.log(ops.where(target > 0, target, 1.0))
    return ops.mean(ops.sum(target * (log_p - log_q), axis=-1))


def bidirectional_xtr_loss(bag_src, bag_tgt, logits_src, logits_tgt):
    """`KL(p(S_l') || q(S_l)) + KL(p(S_l) || q(S_l'))`, each a mean over the batch.

    `logits_src` are predicted from the source embedding (with the target
    language), so they are scored against the target's bag, and the reverse.
    """
    return xtr_kl(bag_tgt, logits_src) + xtr_kl(bag_src, logits_tgt)
