"""Learning-rate schedules."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tf_msemb")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak`, then linear or cosine decay.

    Args:
        peak: learning rate at the end of warm-up.
        warmup_steps: steps of linear warm-up.
        total_steps: step at which decay reaches `peak * end_fraction`.
        decay: `"linear"`, `"cosine"` or `"constant"`.
        end_fraction: final rate as a fraction of `peak`.
    """

    def __init__(self, peak, warmup_steps, total_steps, decay="linear", end_fraction=0.0):
        if decay not in ("linear", "cosine", "constant"):
            raise ValueError(f"Unknown decay {decay!r}; use 'linear', 'cosine' or 'constant'.")
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.decay = decay
        self.end_fraction = float(end_fraction)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = ops.minimum(1.0, (step + 1.0) / max(self.warmup_steps, 1))
        span = max(self.total_steps - self.warmup_steps, 1)
        progress = ops.clip((step - self.warmup_steps) / span, 0.0, 1.0)
        if self.decay == "linear":
            factor = 1.0 - progress
        elif self.decay == "cosine":
            factor = 0.5 * (1.0 + ops.cos(math.pi * progress))
        else:
            factor = ops.ones_like(progress)
        factor = self.end_fraction + (1.0 - self.end_fraction) * factor
        return self.peak * ops.where(step < self.warmup_steps, warmup, factor)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
            "end_fraction": self.end_fraction,
        }
