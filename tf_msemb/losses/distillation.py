"""Distillation losses: a student regresses a teacher's sentence vectors.

Reference: Reimers & Gurevych 2020 (seed 001), Sec. 2; an MSE of the same
vectors is the EMA-teacher loss of seed 000 (Sec. 5.2, Eq. 1).
"""

from keras import ops


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
