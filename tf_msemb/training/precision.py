"""Mixed precision as a config switch."""

import contextlib

import keras

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


@contextlib.contextmanager
def precision_policy(name):
    """Sets Keras' global dtype policy to `name` for the models built inside; restores the old one after.

    `mixed_bfloat16` (TPUs, CPUs with AVX512-BF16, recent GPUs) needs no loss
    scaling; `mixed_float16` (GPUs) does: see `wrap_optimizer`.
    """
    if name not in POLICIES:
        raise ValueError(f"Unknown precision {name!r}; choose one of {', '.join(POLICIES)}.")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def wrap_optimizer(optimizer, name):
    """Under `mixed_float16`, a dynamic `LossScaleOptimizer` around `optimizer` (float16 gradients underflow)."""
    if name == "mixed_float16":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
