"""Optimizer factory configured by gin."""

import math

import gin
import keras

from tf_msemb.training.adam_l2 import AdamL2
from tf_msemb.training.fused_adam import FusedAdam
from tf_msemb.training.fused_adam import FusedAdamW
from tf_msemb.training.lars import LARS
from tf_msemb.training.schedules import WarmupDecay
from tf_msemb.training.touched_rows import TouchedRowsAdam
from tf_msemb.training.touched_rows import TouchedRowsAdamW
from tf_msemb.training.touched_rows import TouchedRowsUnfusedAdam
from tf_msemb.training.touched_rows import TouchedRowsUnfusedAdamW

# Biases and normalization parameters are not decayed (BERT / seed 000 practice).
NO_DECAY = ["bias", "gamma", "beta"]


def scaled_learning_rate(learning_rate, global_batch_size, rule="none", reference_batch_size=None):
    """`learning_rate` tuned at `reference_batch_size`, rescaled for `global_batch_size`.

    `"linear"`: lr x B / B_ref (Goyal et al. 2017, for SGD-like optimizers);
    `"sqrt"`: lr x sqrt(B / B_ref) (often better for Adam); `"none"`: unchanged.
    """
    if rule == "none":
        return learning_rate
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"Unknown learning-rate scaling rule {rule!r}; choose 'none', 'linear' or 'sqrt'.")
    if not reference_batch_size:
        raise ValueError(f"Learning-rate scaling {rule!r} needs make_optimizer.reference_batch_size.")
    ratio = global_batch_size / reference_batch_size
    return learning_rate * (ratio if rule == "linear" else math.sqrt(ratio))


@gin.configurable(denylist=["total_steps", "global_batch_size"])
def make_optimizer(
    total_steps,
    global_batch_size=None,
    name="adamw",
    learning_rate=1e-4,
    scaling="none",
    reference_batch_size=None,
    warmup_steps=100,
    warmup_fraction=None,
    decay="linear",
    end_fraction=0.0,
    weight_decay=0.01,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    global_clipnorm=None,
    momentum=0.9,
    lars_eta=0.001,
    step_at=0.825,
    step_factor=0.1,
    fused=True,
    embedding_update="dense",
):
    """AdamW, Adam, Adam with L2, LARS (warm-up then decay) or SGD (a step); `total_steps` and
    `global_batch_size` come from the train loop.

    `learning_rate` is the peak rate at `reference_batch_size`; `scaling`
    (`"none"`, `"linear"`, `"sqrt"`) adapts it to the run's global batch
    (`scaled_learning_rate`), so a recipe keeps its meaning on more replicas.
    `warmup_fraction` (of `total_steps`) replaces `warmup_steps` for a recipe
    whose paper warms up a share of its run (seed 000: 54K of 105K steps).

    `global_clipnorm` clips the gradient by its global norm after the
    replicas' gradients are summed (`Objective.minimize`; seed 002's
    clip 10).

    For LARS, `weight_decay` is its coupled L2 rate and `momentum`, `lars_eta`
    its momentum and trust coefficient (seed 000: lr 0.02, momentum 0.9, decay 1e-6).
    For `"adam_l2"` (Adam with L2, seed 003), `weight_decay` is the coupled L2
    rate added to every gradient (`AdamL2`), not AdamW's decoupled decay.

    `fused` runs Adam's and AdamW's update as TensorFlow's fused kernel
    (`FusedAdam`, `FusedAdamW`: the same float32 update up to rounding,
    half the optimizer's time); `False` keeps Keras' elementwise ops.
    `embedding_update="touched_rows"` (Adam and AdamW) updates an embedding
    table only on the rows the batch touched (`training.touched_rows`: how
    its moments and decay differ from dense Adam), fused or not as `fused`
    says; `"dense"` is Adam's own.

    `"sgd"` (with `momentum`; 0 is plain SGD) follows seed 004's step schedule
    instead of warm-up and decay: `learning_rate` until `step_at` of the run,
    then `learning_rate * step_factor` (Sec. 4.2: 0.003, then 0.0003 after 33M
    of 40M steps, so `step_at = 0.825`, `step_factor = 0.1`).
    """
    if embedding_update not in ("dense", "touched_rows"):
        raise ValueError(f"make_optimizer.embedding_update is {embedding_update!r}; choose 'dense' or 'touched_rows'.")
    touched = embedding_update == "touched_rows"
    if touched and name not in ("adam", "adamw"):
        raise ValueError(f"make_optimizer.embedding_update = 'touched_rows' is for 'adam' and 'adamw', not {name!r}.")
    if global_batch_size is not None:
        learning_rate = scaled_learning_rate(learning_rate, global_batch_size, scaling, reference_batch_size)
    if name == "sgd":
        schedule = keras.optimizers.schedules.PiecewiseConstantDecay(
            [int(step_at * total_steps)], [learning_rate, learning_rate * step_factor]
        )
        return keras.optimizers.SGD(learning_rate=schedule, momentum=momentum, global_clipnorm=global_clipnorm)
    if warmup_fraction is not None:
        if not 0.0 <= warmup_fraction <= 1.0:
            raise ValueError(f"make_optimizer.warmup_fraction is {warmup_fraction}; give a share of the run in [0, 1].")
        warmup_steps = round(warmup_fraction * total_steps)
    schedule = WarmupDecay(learning_rate, min(warmup_steps, total_steps), total_steps, decay, end_fraction)
    if name == "adamw":
        adamw = ((TouchedRowsAdamW, FusedAdamW) if fused else (TouchedRowsUnfusedAdamW, keras.optimizers.AdamW))
        optimizer = adamw[0 if touched else 1](
            learning_rate=schedule,
            weight_decay=weight_decay,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            global_clipnorm=global_clipnorm,
        )
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
        return optimizer
    if name == "adam":
        adam = (TouchedRowsAdam, FusedAdam) if fused else (TouchedRowsUnfusedAdam, keras.optimizers.Adam)
        return adam[0 if touched else 1](
            learning_rate=schedule, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, global_clipnorm=global_clipnorm
        )
    if name == "adam_l2":
        return AdamL2(
            l2=weight_decay, learning_rate=schedule, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
            global_clipnorm=global_clipnorm,
        )
    if name == "lars":
        return LARS(
            learning_rate=schedule, momentum=momentum, weight_decay_rate=weight_decay, eta=lars_eta,
            global_clipnorm=global_clipnorm,
        )
    raise ValueError(f"Unknown optimizer {name!r}; choose 'adamw', 'adam', 'adam_l2', 'lars' or 'sgd'.")
