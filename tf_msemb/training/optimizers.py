"""Optimizer factory configured by gin."""

import gin
import keras

from tf_msemb.training.lars import LARS
from tf_msemb.training.schedules import WarmupDecay

# Biases and normalization parameters are not decayed (BERT / seed 000 practice).
NO_DECAY = ["bias", "gamma", "beta"]


@gin.configurable(denylist=["total_steps"])
def make_optimizer(
    total_steps,
    name="adamw",
    learning_rate=1e-4,
    warmup_steps=100,
    decay="linear",
    end_fraction=0.0,
    weight_decay=0.01,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    clipnorm=None,
    momentum=0.9,
    lars_eta=0.001,
):
    """AdamW, Adam or LARS with warm-up then decay; `total_steps` comes from the train loop.

    For LARS, `weight_decay` is its coupled L2 rate and `momentum`, `lars_eta`
    its momentum and trust coefficient (seed 000: lr 0.02, momentum 0.9, decay 1e-6).
    """
    schedule = WarmupDecay(learning_rate, min(warmup_steps, total_steps), total_steps, decay, end_fraction)
    if name == "adamw":
        optimizer = keras.optimizers.AdamW(
            learning_rate=schedule,
            weight_decay=weight_decay,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            clipnorm=clipnorm,
        )
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
        return optimizer
    if name == "adam":
        return keras.optimizers.Adam(
            learning_rate=schedule, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, clipnorm=clipnorm
        )
    if name == "lars":
        return LARS(
            learning_rate=schedule, momentum=momentum, weight_decay_rate=weight_decay, eta=lars_eta, clipnorm=clipnorm
        )
    raise ValueError(f"Unknown optimizer {name!r}; choose 'adamw', 'adam' or 'lars'.")
