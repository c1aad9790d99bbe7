"""Optimizer factory configured by gin."""

import gin
import keras

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
):
    """AdamW (or Adam) with warm-up then decay; `total_steps` comes from the train loop."""
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
    raise ValueError(f"Unknown optimizer {name!r}; choose 'adamw' or 'adam'.")
