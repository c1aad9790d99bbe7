"""Adam and AdamW that update only the rows of an embedding table a batch touched ("lazy" Adam).

A 250K-row table (XLM-R's vocabulary: 96M of multilingual-e5-small's 118M
parameters) gets a gradient on the few thousand rows a batch's tokens use,
but dense Adam reads and writes the whole table, both moments and the
decoupled weight decay every step. Given the table's gradient as
`tf.IndexedSlices`, this update gathers the touched rows (repeated ids summed
first, as the dense gradient sums them), runs Adam's update on them with the
step's bias correction, and scatters them back; every other variable gets the
dense update (`FusedAdam` / `FusedAdamW`, or Keras' `Adam` / `AdamW` in the
`Unfused` classes, for `make_optimizer(fused=False)`).

How it differs from dense Adam (Kingma & Ba, Algorithm 1): an untouched row
keeps its moments as they were, where dense Adam decays them (m <- b1 m,
v <- b2 v) and still moves the row by `m / (sqrt(v) + eps)`; and AdamW's
decay `w <- w - lr wd w` reaches a row only in steps that touch it. A step
that touches every row is dense Adam's step, to float rounding. This is
TensorFlow Addons' `LazyAdam` and PyTorch's `SparseAdam` update.
"""

import keras
import tensorflow as tf

from tf_msemb.objectives.cross_replica import summed_slices
from tf_msemb.training.fused_adam import FusedAdam
from tf_msemb.training.fused_adam import FusedAdamW


class _TouchedRowsUpdate:
    """Adam's `update_step` on the touched rows for `IndexedSlices` gradients; the dense step otherwise.

    AdamW's weight decay of such a variable moves into the update (touched
    rows only): Keras applies it to whole variables before `update_step`.
    """

    touched_rows = True

    def _backend_apply_gradients(self, grads, trainable_variables):
        self._sliced = {id(v) for g, v in zip(grads, trainable_variables) if isinstance(g, tf.IndexedSlices)}
        super()._backend_apply_gradients(grads, trainable_variables)

    def _apply_weight_decay(self, variables):
        sliced = getattr(self, "_sliced", set())
        super()._apply_weight_decay([v for v in variables if id(v) not in sliced])

    def _clip_gradients(self, grads):
        if self.global_clipnorm and any(isinstance(g, tf.IndexedSlices) for g in grads):
            grads = [summed_slices(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            present = [i for i, g in enumerate(grads) if g is not None]
            clipped, _ = tf.clip_by_global_norm([grads[i] for i in present], self.global_clipnorm)
            grads = list(grads)
            for i, g in zip(present, clipped):
                grads[i] = g
            return grads
        return super()._clip_gradients(grads)

    def update_step(self, gradient, variable, learning_rate):
        if not isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        m, v = self._momentums[index].value, self._velocities[index].value
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        lr = tf.cast(learning_rate, dtype)
        alpha = lr * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
        # Summed here, after the replicas' slices are concatenated (a row may come from each replica).
        gradient = summed_slices(gradient)
        rows, g = gradient.indices, tf.cast(gradient.values, dtype)
        m_rows = tf.gather(m, rows)
        v_rows = tf.gather(v, rows)
        m_rows = m_rows + (g - m_rows) * (1 - beta_1)
        v_rows = v_rows + (tf.square(g) - v_rows) * (1 - beta_2)
        m.scatter_update(tf.IndexedSlices(m_rows, rows))
        v.scatter_update(tf.IndexedSlices(v_rows, rows))
        w_rows = tf.gather(variable, rows)
        weight_decay = getattr(self, "weight_decay", None)
        if weight_decay and self._use_weight_decay(self._trainable_variables[index]):
            w_rows = w_rows - w_rows * tf.cast(weight_decay, dtype) * lr
        w_rows = w_rows - m_rows * alpha / (tf.sqrt(v_rows) + tf.cast(self.epsilon, dtype))
        variable.scatter_update(tf.IndexedSlices(w_rows, rows))


@keras.saving.register_keras_serializable(package="tf_msemb")
class TouchedRowsAdam(_TouchedRowsUpdate, FusedAdam):
    """`FusedAdam` whose embedding tables (sliced gradients) update only the rows a batch touched."""

    def __init__(self, name="touched_rows_adam", **kwargs):
        super().__init__(name=name, **kwargs)


@keras.saving.register_keras_serializable(package="tf_msemb")
class TouchedRowsAdamW(_TouchedRowsUpdate, FusedAdamW):
    """`FusedAdamW` whose embedding tables (sliced gradients) update only the rows a batch touched."""

    def __init__(self, name="touched_rows_adamw", **kwargs):
        super().__init__(name=name, **kwargs)


@keras.saving.register_keras_serializable(package="tf_msemb")
class TouchedRowsUnfusedAdam(_TouchedRowsUpdate, keras.optimizers.Adam):
    """Keras' `Adam` (elementwise ops) whose embedding tables update only the rows a batch touched."""

    def __init__(self, name="touched_rows_unfused_adam", **kwargs):
        super().__init__(name=name, **kwargs)


@keras.saving.register_keras_serializable(package="tf_msemb")
class TouchedRowsUnfusedAdamW(_TouchedRowsUpdate, keras.optimizers.AdamW):
    """Keras' `AdamW` (elementwise ops) whose embedding tables update only the rows a batch touched."""

    def __init__(self, name="touched_rows_unfused_adamw", **kwargs):
        super().__init__(name=name, **kwargs)
