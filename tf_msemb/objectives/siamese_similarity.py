"""`SiameseSimilarity`: monolingual stage 1 of seed 000 (NLI classification, STS regression)."""

import gin
import keras
import tensorflow as tf

from tf_msemb.losses.siamese import cosine_mse_loss
from tf_msemb.losses.siamese import cosine_similarity
from tf_msemb.losses.siamese import nli_softmax_loss
from tf_msemb.losses.siamese import pair_features
from tf_msemb.models.encoder import ensure_built
from tf_msemb.objectives.cross_replica import num_replicas


@gin.configurable(denylist=["encoder"])
class SiameseSimilarity(keras.Model):
    """One encoder embeds both sentences of a labeled pair.

    Batches are `{"a", "b": tokens, "target"}` (`make_labeled_dataset`).

    Args:
        encoder: the shared encoder.
        task: `"sts"`: MSE between `cos(u, v)` and the score in [0, 1];
            `"nli"`: softmax classifier on `(u, v, |u - v|)` over `num_labels`.
    """

    def __init__(self, encoder, task="sts", num_labels=3, **kwargs):
        super().__init__(**kwargs)
        if task not in ("sts", "nli"):
            raise ValueError(f"Unknown task {task!r}; choose 'sts' or 'nli'.")
        self.encoder = encoder
        self.task = task
        self.classifier = keras.layers.Dense(num_labels, name="nli_classifier") if task == "nli" else None
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.quality_tracker = keras.metrics.Mean(name="accuracy" if task == "nli" else "mean_cosine")

    def data_options(self):
        return {}

    def build(self, inputs_shape=None):
        ensure_built(self.encoder)
        if self.classifier is not None:
            self.classifier.build((None, 3 * self.encoder.output_dim))
        self.built = True

    @property
    def metrics(self):
        return [self.loss_tracker, self.quality_tracker]

    def call(self, inputs, training=False):
        return self.encoder(inputs, training=training)

    def train_step(self, data):
        with tf.GradientTape() as tape:
            u = self.encoder(data["a"], training=True)
            v = self.encoder(data["b"], training=True)
            if self.task == "sts":
                loss = cosine_mse_loss(u, v, data["target"])
                quality = tf.reduce_mean(cosine_similarity(u, v))
            else:
                logits = self.classifier(pair_features(u, v))
                loss = nli_softmax_loss(logits, data["target"])
                predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
                quality = tf.reduce_mean(tf.cast(predicted == tf.cast(data["target"], tf.int32), tf.float32))
            scaled_loss = loss / num_replicas()
        gradients = tape.gradient(scaled_loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        self.quality_tracker.update_state(quality)
        return {m.name: m.result() for m in self.metrics}
