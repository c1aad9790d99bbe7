"""Pooling token states `[b, l, d]` with a padding mask `[b, l]` into `[b, d]`."""

import keras
from keras import ops


def _float_mask(mask, dtype):
    return ops.cast(ops.expand_dims(mask, -1), dtype)


class Pooling(keras.layers.Layer):
    """Base class: `call(hidden, mask)`; stateless unless a subclass adds weights."""

    def build(self, hidden_shape, mask_shape=None):
        self.built = True


class MaskedMeanPooling(Pooling):
    """Average of the non-padding token states (seed 000, 001, 002, 003)."""

    def call(self, hidden, mask):
        m = _float_mask(mask, hidden.dtype)
        return ops.sum(hidden * m, axis=1) / ops.maximum(ops.sum(m, axis=1), 1.0)


class MaskedMeanSqrtLenPooling(Pooling):
    """Sum of the non-padding token states over the square root of their count (sentence-transformers' mean_sqrt_len)."""

    def call(self, hidden, mask):
        m = _float_mask(mask, hidden.dtype)
        return ops.sum(hidden * m, axis=1) / ops.sqrt(ops.maximum(ops.sum(m, axis=1), 1.0))


class MaskedMaxPooling(Pooling):
    """Element-wise maximum over the non-padding token states."""

    def call(self, hidden, mask):
        very_negative = -1e4 if hidden.dtype == "float16" else -1e9
        masked = ops.where(ops.expand_dims(mask, -1), hidden, ops.cast(very_negative, hidden.dtype))
        return ops.max(masked, axis=1, initial=very_negative)


class FirstTokenPooling(Pooling):
    """The state of the first token (`[CLS]` / `<s>`)."""

    def call(self, hidden, mask):
        return hidden[:, 0, :]


class AttentionPooling(Pooling):
    """Softmax-weighted sum of token states, scored by a learned query vector."""

    def build(self, hidden_shape, mask_shape=None):
        self.query = self.add_weight(
            name="query", shape=(hidden_shape[-1],), initializer="glorot_uniform"
        )
        self.built = True

    def call(self, hidden, mask):
        scores = ops.einsum("bld,d->bl", hidden, ops.cast(self.query, hidden.dtype))
        scores = ops.where(mask, scores, ops.cast(-1e4, scores.dtype))
        weights = ops.softmax(ops.cast(scores, "float32"), axis=-1)
        return ops.einsum("bl,bld->bd", ops.cast(weights, hidden.dtype), hidden)


POOLINGS = {
    "mean": MaskedMeanPooling,
    "mean_sqrt_len": MaskedMeanSqrtLenPooling,
    "max": MaskedMaxPooling,
    "first": FirstTokenPooling,
    "attention": AttentionPooling,
}


class MultiPooling(Pooling):
    """Concatenates several poolings and projects them (seed 004, Sec. 4.2).

    Args:
        poolings: names from `POOLINGS`, e.g. `("max", "mean", "first", "attention")`.
        output_dim: size of the projection.
    """

    def __init__(self, poolings, output_dim, **kwargs):
        super().__init__(**kwargs)
        unknown = [p for p in poolings if p not in POOLINGS]
        if unknown or not poolings:
            raise ValueError(f"Unknown pooling {unknown}; choose from {sorted(POOLINGS)}.")
        self.poolings = tuple(poolings)
        self.output_dim = output_dim
        self.pool_layers = [POOLINGS[p](name=f"{p}_pool", dtype=self.dtype_policy) for p in self.poolings]
        self.projection = keras.layers.Dense(output_dim, name="projection", dtype=self.dtype_policy)

    def build(self, hidden_shape, mask_shape=None):
        for layer in self.pool_layers:
            layer.build(hidden_shape, mask_shape)
        self.projection.build((hidden_shape[0], hidden_shape[-1] * len(self.pool_layers)))
        self.built = True

    def call(self, hidden, mask):
        pooled = [layer(hidden, mask) for layer in self.pool_layers]
        return self.projection(ops.concatenate(pooled, axis=-1))

    def get_config(self):
        config = super().get_config()
        config.update(poolings=list(self.poolings), output_dim=self.output_dim)
        return config


class ConcatPooling(Pooling):
    """Several poolings side by side, unprojected (sentence-transformers' pooling of several modes).

    Args:
        poolings: names from `POOLINGS`, in output order, e.g. `("first", "mean")`.
    """

    def __init__(self, poolings, **kwargs):
        super().__init__(**kwargs)
        unknown = [p for p in poolings if p not in POOLINGS]
        if unknown or not poolings:
            raise ValueError(f"Unknown pooling {unknown}; choose from {sorted(POOLINGS)}.")
        self.poolings = tuple(poolings)
        self.pool_layers = [POOLINGS[p](name=f"{p}_pool", dtype=self.dtype_policy) for p in self.poolings]

    def build(self, hidden_shape, mask_shape=None):
        for layer in self.pool_layers:
            layer.build(hidden_shape, mask_shape)
        self.built = True

    def call(self, hidden, mask):
        return ops.concatenate([layer(hidden, mask) for layer in self.pool_layers], axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(poolings=list(self.poolings))
        return config


def make_pooling(pooling, output_dim=None, name="pooling", dtype=None):
    """A pooling layer from a name, `ConcatPooling` from names joined by `+` (`"first+mean"`), or `MultiPooling`
    (projected to `output_dim`) from a list of names; `dtype` is its policy."""
    if isinstance(pooling, str) and "+" in pooling:
        return ConcatPooling(pooling.split("+"), name=name, dtype=dtype)
    if isinstance(pooling, str):
        if pooling not in POOLINGS:
            raise ValueError(f"Unknown pooling {pooling!r}; choose from {sorted(POOLINGS)}.")
        return POOLINGS[pooling](name=name, dtype=dtype)
    if output_dim is None:
        raise ValueError("Concatenated poolings need `pooled_dim`: the size they are projected to.")
    return MultiPooling(pooling, output_dim, name=name, dtype=dtype)
