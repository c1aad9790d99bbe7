"""`EMATeacherDistillation`: the teacher is an exponential moving average of the student (seed 000)."""

import math

import gin
import tensorflow as tf
from keras import ops

from tf_msemb.losses.distillation import distillation_mse
from tf_msemb.models.encoder import ensure_built
from tf_msemb.objectives.base import Objective
from tf_msemb.objectives.momentum import momentum_copy
from tf_msemb.objectives.momentum import momentum_update


def byol_tau(step, total_steps, tau_base):
    """`tau_k = 1 - (1 - tau_base) * (cos(pi k / K) + 1) / 2` (BYOL; seed 000 Sec. 3.2)."""
    progress = ops.minimum(ops.cast(step, "float32") / float(max(total_steps, 1)), 1.0)
    return 1.0 - (1.0 - tau_base) * (ops.cos(math.pi * progress) + 1.0) / 2.0


@gin.configurable(denylist=["encoder"])
class EMATeacherDistillation(Objective):
    """Student f_theta sees the translation, teacher f_xi the pivot; loss `MSE(f_theta(x_lg), f_xi(x_en))`.

    After every optimizer step `xi <- tau * xi + (1 - tau) * theta` over all
    float weights, with tau from `byol_tau` (or constant `tau_base` when
    `schedule="constant"`); `frozen=True` keeps the initial teacher (the
    paper's ablation). The schedule position is the optimizer's step count,
    so a resumed run continues the schedule. Only the student is exported.

    Args:
        encoder: the student; the teacher starts as an exact copy.
        total_steps: K of the schedule; default: the run's `train.num_steps`.
        tau_base: 0.99999 in the paper; ablations 0.9999 / 0.999999.
        schedule: `"cosine"` (BYOL) or `"constant"`.
        frozen: never update the teacher.
    """

    def __init__(self, encoder, total_steps=None, tau_base=0.99999, schedule="cosine", frozen=False, **kwargs):
        super().__init__(encoder, **kwargs)
        if schedule not in ("cosine", "constant"):
            raise ValueError(f"Unknown tau schedule {schedule!r}; use 'cosine' or 'constant'.")
        self.total_steps = total_steps or self.run.total_steps
        if schedule == "cosine" and not self.total_steps:
            raise ValueError("EMATeacherDistillation's cosine schedule needs total_steps (the trainer passes "
                             "train.num_steps).")
        self.tau_base = tau_base
        self.schedule = schedule
        self.frozen = frozen
        self.teacher = momentum_copy(ensure_built(encoder))
        self.add_trackers("loss", "tau")

    def tau(self, step):
        if self.schedule == "constant":
            return ops.convert_to_tensor(self.tau_base, "float32")
        return byol_tau(step, self.total_steps, self.tau_base)

    def train_step(self, data):
        target = tf.stop_gradient(self.teacher(data["src"], training=False))
        with tf.GradientTape() as tape:
            prediction = self.encoder(data["tgt"], training=True)
            loss = distillation_mse(target, prediction)
            scaled_loss = self.loss_to_minimize(loss)
        tau = self.tau(self.optimizer.iterations)  # k = steps taken before this one
        self.minimize(tape, scaled_loss, self.encoder.trainable_variables)
        if not self.frozen:
            momentum_update(self.teacher, self.encoder, tau)
        return self.report(loss=loss, tau=tau)
