"""`EMATeacherDistillation`: the teacher is an exponential moving average of the student (seed 000)."""

import math

import gin
import tensorflow as tf
from keras import ops

from tf_msemb.losses.distillation import distillation_mse
from tf_msemb.models.encoder import ensure_built
from tf_msemb.objectives.base import Objective


def byol_tau(step, total_steps, tau_base):
    """`tau_k = 1 - (1 - tau_base) * (cos(pi k / K) + 1) / 2` (BYOL; seed 000 Sec. 3.2)."""
    progress = ops.minimum(ops.cast(step, "float32") / float(max(total_steps, 1)), 1.0)
    return 1.0 - (1.0 - tau_base) * (ops.cos(math.pi * progress) + 1.0) / 2.0


def _first_replica_state(next_creator, **kwargs):
    # Every replica assigns the same EMA value; ONLY_FIRST_REPLICA makes the
    # first replica's write land in every copy instead of each replica
    # updating only its own (which is what the default aggregation does).
    kwargs["aggregation"] = tf.VariableAggregation.ONLY_FIRST_REPLICA
    kwargs["trainable"] = False
    return next_creator(**kwargs)


def clone_as_state(encoder):
    """A weight-for-weight copy of `encoder` whose variables are non-trained state."""
    with tf.variable_creator_scope(_first_replica_state):
        clone = ensure_built(encoder.__class__.from_config(encoder.get_config()))
    clone.set_weights(encoder.get_weights())
    clone.trainable = False
    return clone


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
        total_steps: K of the schedule (bind it to train.num_steps with a gin macro).
        tau_base: 0.99999 in the paper; ablations 0.9999 / 0.999999.
        schedule: `"cosine"` (BYOL) or `"constant"`.
        frozen: never update the teacher.
    """

    def __init__(self, encoder, total_steps=gin.REQUIRED, tau_base=0.99999, schedule="cosine", frozen=False, **kwargs):
        super().__init__(encoder, **kwargs)
        if schedule not in ("cosine", "constant"):
            raise ValueError(f"Unknown tau schedule {schedule!r}; use 'cosine' or 'constant'.")
        self.total_steps = total_steps
        self.tau_base = tau_base
        self.schedule = schedule
        self.frozen = frozen
        self.teacher = clone_as_state(ensure_built(encoder))
        self._pairs = [
            (t, s) for t, s in zip(self.teacher.weights, encoder.weights) if "float" in str(s.dtype)
        ]
        self.options = dict(total_steps=total_steps, tau_base=tau_base, schedule=schedule, frozen=frozen)
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
            for teacher_weight, student_weight in self._pairs:
                teacher_weight.assign(tau * teacher_weight + (1.0 - tau) * student_weight)
        return self.report(loss, tau)
