"""Distillation losses: a student regresses a teacher's sentence vectors.

Reference: Reimers & Gurevych 2020 (seed 001), Sec. 2; an MSE of the same
vectors is the EMA-teacher loss of seed 000 (Sec. 5.2, Eq. 1).
"""

from keras import ops

from tf_msemb.losses.translation_ranking import in_batch_softmax_loss


def distillation_mse(target, prediction, reduction="sum"):
    """The squared error between student and teacher vectors.

    `"sum"`: `1/|B| sum_j ||target_j - prediction_j||^2`, squared L2 per row
    and mean over rows, as seed 001 writes its loss (Sec. 2); `"mean"`: the
    element mean, that divided by `d` (PyTorch's `MSELoss`, the MSE of seed
    000 Eq. 1). The two differ by the constant `d`, which Adam ignores but SGD
    and LARS do not.

    Args:
        target: `[b, d]` teacher vectors (no gradient flows into them).
        prediction: `[b, d]` student vectors.
        reduction: `"sum"` or `"mean"` over the vector dimension.
    """
    if reduction not in ("sum", "mean"):
        raise ValueError(f"Unknown MSE reduction {reduction!r}; use 'sum' or 'mean'.")
    diff = ops.cast(prediction, "float32") - ops.stop_gradient(ops.cast(target, "float32"))
    per_row = ops.sum if reduction == "sum" else ops.mean
    return ops.mean(per_row(ops.square(diff), axis=-1))


def multilingual_distillation_loss(teacher_src, student_src, student_tgt):
    """Seed 001 Sec. 2: `MSE(T(s), S(s)) + MSE(T(s), S(t))`; returns (total, src part, tgt part)."""
    src = distillation_mse(teacher_src, student_src)
    tgt = distillation_mse(teacher_src, student_tgt)
    return src + tgt, src, tgt


def teacher_ranking_loss(student_queries, teacher_candidates, labels, scale=20.0, margin=0.0, candidate_valid=None):
    """Each translation's student vector ranks its source's teacher vector first among the batch's teacher vectors.

    Seed 004's additive margin softmax (Eq. 7, `x -> y`) with cosines, but the
    candidates are the fixed teacher vectors of the batch's sources (gathered
    over replicas) instead of the student's own: only the translation side
    moves, and English, held by the MSE to the same vectors, is never pulled
    apart. A candidate whose teacher vector equals the positive's (the same
    English sentence paired with another language in the batch) is left out:
    it is the same target, not a negative.

    Args:
        student_queries: `[b, d]` student vectors of the translations (and, with
            `ranking_sources`, of the sources), the queries.
        teacher_candidates: `[n, d]` teacher vectors of the sources, `n >= b`.
        labels: int `[b]`, each query's own source in `teacher_candidates`.
        scale: logits are `scale * cosine`.
        margin: subtracted from the positive's cosine before scaling.
        candidate_valid: optional bool `[n]`; False candidates (unfilled queue
            slots) are left out.
    """
    queries = ops.normalize(ops.cast(student_queries, "float32"), axis=-1)
    candidates = ops.stop_gradient(ops.normalize(ops.cast(teacher_candidates, "float32"), axis=-1))
    positives = ops.take(candidates, labels, axis=0)
    same = ops.matmul(positives, ops.transpose(candidates)) >= 1.0 - 1e-6
    own = ops.cast(ops.one_hot(labels, ops.shape(candidates)[0]), "bool")
    kept = ops.logical_or(own, ops.logical_not(same))
    if candidate_valid is not None:
        kept = ops.logical_and(kept, ops.cast(candidate_valid, "bool")[None, :])
    return in_batch_softmax_loss(queries, candidates, labels, scale, margin, candidate_mask=kept)
