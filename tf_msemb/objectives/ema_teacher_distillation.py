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
    """`tau_k = 1 - (1 - tau_base) * (cos(pi k / K) + 1) / 2` (BYOL; seed 000 Sec. 5.3)."""
    progress = ops.minimum(ops.cast(step, "float32") / float(max(total_steps, 1)), 1.0)
    return 1.0 - (1.0 - tau_base) * (ops.cos(math.pi * progress) + 1.0) / 2.0


def rescaled_tau_base(tau_base, reference_steps, total_steps):
    """The `tau_base` that moves the teacher as far in `total_steps` as `tau_base` does in `reference_steps`.

    Each update moves the teacher by a fraction `1 - tau_k` of its distance to
    the student; under the cosine schedule these sum to about
    `(1 - tau_base) * K / 2` (the constant schedule: `(1 - tau_base) * K`).
    Keeping `(1 - tau_base) * K` fixed keeps that travel: the paper's 0.99999
    at K = 105K (travel 0.525, the teacher keeps about 59 % of its start)
    becomes 0.99825 at K = 600. Without the rescaling a short run trains the
    paper's frozen-teacher ablation instead (Sec. 6.4, Table 4).
    """
    rate = (1.0 - tau_base) * reference_steps / total_steps
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"tau_base {tau_base} at {reference_steps} steps has no equivalent for a run of "
                         f"{total_steps} steps (1 - tau would be {rate:.3g}); lengthen the run or lower "
                         "EMATeacherDistillation.tau_reference_steps.")
    return 1.0 - rate


@gin.configurable(denylist=["encoder"])
class EMATeacherDistillation(Objective):
    """Student f_theta sees the translation, teacher f_xi the pivot; loss `MSE(f_theta(x_lg), f_xi(x_en))`.

    After every optimizer step `xi <- tau * xi + (1 - tau) * theta` (Eq. 2)
    over all float weights, with tau from `byol_tau` (or constant `tau_base`
    when `schedule="constant"`); `frozen=True` keeps the initial teacher (the
    paper's ablation). The schedule position is the optimizer's step count,
    so a resumed run continues the schedule. Only the student is exported.

    A `tau_base` tuned for a run of `tau_reference_steps` steps is rescaled
    to this run's length (`rescaled_tau_base`), so a shorter run moves the
    teacher as far as the paper's.

    Args:
        encoder: the student; the teacher starts as an exact copy.
        total_steps: K of the schedule; default: the run's `train.num_steps`.
        tau_base: 0.99999 in the paper; ablations 0.9999 / 0.999999.
        tau_reference_steps: the run length `tau_base` is given for (the
            paper's K = 105,000); None uses `tau_base` as it is.
        schedule: `"cosine"` (BYOL) or `"constant"`.
        frozen: never update the teacher.
        mse: `"mean"` (the default: the paper's element mean, Eq. 1, which
            the LARS rate of 0.02 is tuned for) or `"sum"` (squared distance
            per sentence; under LARS the biases and norms, outside the trust
            ratio, then take d-times larger steps).
    """

    def __init__(self, encoder, total_steps=None, tau_base=0.99999, tau_reference_steps=None, schedule="cosine",
                 frozen=False, mse="mean", **kwargs):
        super().__init__(encoder, **kwargs)
        if schedule not in ("cosine", "constant"):
            raise ValueError(f"Unknown tau schedule {schedule!r}; use 'cosine' or 'constant'.")
        self.total_steps = total_steps or self.run.total_steps
        if (schedule == "cosine" or tau_reference_steps) and not self.total_steps:
            raise ValueError("EMATeacherDistillation's tau needs total_steps (the trainer passes train.num_steps).")
        if tau_reference_steps:
            tau_base = rescaled_tau_base(tau_base, tau_reference_steps, self.total_steps)
        self.tau_base = tau_base
        self.mse = mse
        self.schedule = schedule
        self.frozen = frozen
        self.teacher = momentum_copy(ensure_built(encoder))
        self.add_trackers("loss", "tau")

    def tau(self, step):
        if self.schedule == "constant":
            return ops.convert_to_tensor(self.tau_base, "float32")
        return byol_tau(step, self.total_steps, self.tau_base)

    def distillation_loss(self, data, training=True):
        """Eq. 1: the student's translation against the teacher's pivot; no gradient reaches the teacher."""
        target = tf.stop_gradient(self.teacher(data["src"], training=False))
        prediction = self.encoder(data["tgt"], training=training)
        return distillation_mse(target, prediction, self.mse)

    def train_step(self, data):
        with tf.GradientTape() as tape:
            loss = self.distillation_loss(data)
            scaled_loss = self.loss_to_minimize(loss)
        tau = self.tau(self.optimizer.iterations)  # k = steps taken before this one
        self.minimize(tape, scaled_loss, self.encoder.trainable_variables)
        if not self.frozen:
            self.after_update(lambda: momentum_update(self.teacher, self.encoder, tau))
        return self.report(loss=loss, tau=tau)
