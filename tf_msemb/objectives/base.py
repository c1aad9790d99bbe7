"""`Objective`: what every training objective shares (metrics, the gradient step, config)."""

import keras
import tensorflow as tf

from tf_msemb.models.encoder import ensure_built
from tf_msemb.objectives.cross_replica import num_replicas


class Objective(keras.Model):
    """A `keras.Model` around a sentence encoder whose `train_step` implements one method.

    Subclasses set `self.options` (their constructor arguments other than
    `encoder`, for `get_config` and the export's metadata), create their
    trackers with `add_trackers`, and inside `train_step` compute a loss
    under a `tf.GradientTape`, turn it into the value to differentiate with
    `loss_to_minimize` (still inside the tape) and step with `minimize`.

    Args:
        encoder: tokens -> `[b, d]` (the model exported after training).
    """

    def __init__(self, encoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.options = {}
        self._trackers = []

    def add_trackers(self, *names):
        """Running means reported by `train_step`, in this order."""
        trackers = [keras.metrics.Mean(name=name) for name in names]
        self._trackers = self._trackers + trackers
        return trackers

    @property
    def metrics(self):
        return list(self._trackers)

    def data_options(self):
        """Extra fields the input pipeline must put into each batch (none by default)."""
        return {}

    def build(self, inputs_shape=None):
        ensure_built(self.encoder)
        self.built = True

    def call(self, inputs, training=False):
        return self.encoder(inputs, training=training)

    def loss_to_minimize(self, loss):
        """The loss this replica differentiates.

        The optimizer sums replica gradients, so a hand-written loss is divided
        by the replica count; under `mixed_float16` the loss scale multiplies it
        (the `LossScaleOptimizer` divides the gradients back in `apply`).
        """
        return self.optimizer.scale_loss(loss / num_replicas())

    def minimize(self, tape, scaled_loss, variables=None):
        """One optimizer step on `variables` (default: every trainable variable)."""
        variables = self.trainable_variables if variables is None else variables
        self.optimizer.apply(tape.gradient(scaled_loss, variables), variables)

    def report(self, *values):
        """Updates the trackers with this step's values and returns every tracker's result."""
        for tracker, value in zip(self._trackers, values):
            tracker.update_state(value)
        return {tracker.name: tracker.result() for tracker in self._trackers}

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder), **self.options)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def accuracy(x, candidates, labels):
    """Fraction of rows of `x` whose most similar candidate is the one at `labels`."""
    hits = tf.argmax(tf.matmul(x, candidates, transpose_b=True), axis=1, output_type=tf.int32) == labels
    return tf.reduce_mean(tf.cast(hits, tf.float32))
