"""Mixed precision as a config switch."""

import contextlib

import keras

from tf_msemb.models.encoder import ensure_built

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


def _with_policy(config, name):
    """`config` with every float32 `DTypePolicy` replaced by `name`."""
    if isinstance(config, dict):
        if config.get("class_name") == "DTypePolicy" and config.get("config", {}).get("name") == "float32":
            return dict(config, config=dict(config["config"], name=name))
        return {key: _with_policy(value, name) for key, value in config.items()}
    if isinstance(config, list):
        return [_with_policy(value, name) for value in config]
    return config


def with_precision(model, name):
    """A copy of a built float32 `model` that computes under policy `name`, with the same (float32) weights.

    Serialized configs pin each layer's dtype policy, so the copy is rebuilt
    from a config whose float32 policies are replaced.
    """
    if name == "float32":
        return model
    if name not in POLICIES:
        raise ValueError(f"Unknown precision {name!r}; choose one of {', '.join(POLICIES)}.")
    config = _with_policy(keras.saving.serialize_keras_object(model), name)
    with precision_policy(name):
        copy = ensure_built(keras.saving.deserialize_keras_object(config))
    copy.set_weights(model.get_weights())
    return copy
