"""Distillation losses: a student regresses a teacher's sentence vectors.

Reference: Reimers & Gurevych 2020 (seed 001), Eq. 1; the same MSE is the
EMA-teacher loss of seed 000 (Sec. 3.2).
"""

from keras import ops


def distillation_mse(target, prediction):
    """`1/|B| sum_j ||target_j - prediction_j||^2`: squared L2 per row, mean over rows.

    Args:
        target: `[b, d]` teacher vectors (no gradient flows into them).
        prediction: `[b, d]` student vectors.
    """
    diff = ops.cast(prediction, "float32") - ops.stop_gradient(ops.cast(target, "float32"))
    return ops.mean(ops.sum(ops.square(diff), axis=-1))


def multilingual_distillation_loss(teacher_src, student_src, student_tgt):
    """Seed 001 Eq. 1: `MSE(T(s), S(s)) + MSE(T(s), S(t))`; returns (total, src part, tgt part)."""
    src = distillation_mse(teacher_src, student_src)
    tgt = distillation_mse(teacher_src, student_tgt)
    return src + tgt, src, tgt
