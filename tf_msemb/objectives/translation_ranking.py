"""`TranslationRanking`: bidirectional in-batch softmax over translation pairs."""

import gin
import keras
import tensorflow as tf

from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.cross_replica import num_replicas


@gin.configurable(denylist=["encoder"])
class TranslationRanking(keras.Model):
    """Trains `encoder` so each sentence ranks its translation first.

    Batches are `{"src": tokens, "tgt": tokens}`. Under a strategy, every
    replica scores its sentences against the whole global batch.

    Args:
        encoder: a `SentenceEncoder` (or any model: tokens -> `[b, d]`).
        scale: logit scale, `1 / temperature`.
        temperature: alternative to `scale`; wins when given.
        margin: additive margin on the positive (0 = plain softmax).
    """

    def __init__(self, encoder, scale=20.0, temperature=None, margin=0.0, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.scale = 1.0 / temperature if temperature else scale
        self.margin = margin
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")

    def data_options(self):
        """Nothing beyond `src` and `tgt` tokens."""
        return {}

    def build(self, inputs_shape=None):
        ensure_built(self.encoder)
        self.built = True

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy_tracker]

    def call(self, inputs, training=False):
        return l2_normalize(self.encoder(inputs, training=training))

    def train_step(self, data):
        with tf.GradientTape() as tape:
            x = self(data["src"], training=True)
            y = self(data["tgt"], training=True)
            (x_all, y_all), labels = gather_candidates(x, y)
            loss = bidirectional_ranking_loss(x, y, x_all, y_all, labels, self.scale, self.margin)
            # The optimizer sums replica gradients; a hand-written loss is scaled by hand.
            scaled_loss = loss / num_replicas()
        gradients = tape.gradient(scaled_loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        hits = tf.argmax(tf.matmul(x, y_all, transpose_b=True), axis=1, output_type=tf.int32) == labels
        self.loss_tracker.update_state(loss)
        self.accuracy_tracker.update_state(tf.reduce_mean(tf.cast(hits, tf.float32)))
        return {m.name: m.result() for m in self.metrics}

    def get_config(self):
        config = super().get_config()
        config.update(
            encoder=keras.saving.serialize_keras_object(self.encoder),
            scale=self.scale,
            margin=self.margin,
        )
        return config

    @classmethod
    def from_config(cls, config):
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
