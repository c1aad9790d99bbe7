"""`SiameseSimilarity`: monolingual stage 1 of seed 000 (NLI classification, STS regression)."""

import gin
import keras
import tensorflow as tf

from tf_msemb.losses.siamese import cosent_loss
from tf_msemb.losses.siamese import cosine_mse_loss
from tf_msemb.losses.siamese import cosine_similarity
from tf_msemb.losses.siamese import nli_softmax_loss
from tf_msemb.losses.siamese import pair_features
from tf_msemb.models.encoder import ensure_built
from tf_msemb.objectives.base import Objective


@gin.configurable(denylist=["encoder"])
class SiameseSimilarity(Objective):
    """One encoder embeds both sentences of a labeled pair.

    Batches are `{"a", "b": tokens, "target"}` (`make_labeled_dataset`).

    Args:
        encoder: the shared encoder.
        task: `"sts"`: `sts_loss` on `cos(u, v)` and the score in [0, 1];
            `"nli"`: softmax classifier on `(u, v, |u - v|)` over `num_labels`.
        sts_loss: `"mse"`, seed 000's regression of the cosine on the score,
            or `"cosent"`, which fits only the scores' order
            (`losses.siamese.cosent_loss`, for a pretrained start whose
            cosines are crowded).
        cosent_scale: CoSENT's scale (20, its authors' and sentence-transformers').
    """

    def __init__(self, encoder, task="sts", num_labels=3, sts_loss="mse", cosent_scale=20.0, **kwargs):
        super().__init__(encoder, **kwargs)
        if task not in ("sts", "nli"):
            raise ValueError(f"Unknown task {task!r}; choose 'sts' or 'nli'.")
        if sts_loss not in ("mse", "cosent"):
            raise ValueError(f"Unknown SiameseSimilarity.sts_loss {sts_loss!r}; choose 'mse' or 'cosent'.")
        self.task, self.sts_loss, self.cosent_scale = task, sts_loss, cosent_scale
        self.classifier = keras.layers.Dense(num_labels, name="nli_classifier") if task == "nli" else None
        self.quality = "accuracy" if task == "nli" else "mean_cosine"
        self.add_trackers("loss", self.quality)

    def build(self, inputs_shape=None):
        ensure_built(self.encoder)
        if self.classifier is not None:
            self.classifier.build((None, 3 * self.encoder.output_dim))
        self.built = True

    def train_step(self, data):
        with tf.GradientTape() as tape:
            u = self.encoder(data["a"], training=True)
            v = self.encoder(data["b"], training=True)
            if self.task == "sts":
                if self.sts_loss == "mse":
                    loss = cosine_mse_loss(u, v, data["target"])
                else:
                    loss = cosent_loss(u, v, data["target"], self.cosent_scale)
                quality = tf.reduce_mean(cosine_similarity(u, v))
            else:
                logits = self.classifier(pair_features(u, v))
                loss = nli_softmax_loss(logits, data["target"])
                predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
                quality = tf.reduce_mean(tf.cast(predicted == tf.cast(data["target"], tf.int32), tf.float32))
            scaled_loss = self.loss_to_minimize(loss)
        self.minimize(tape, scaled_loss)
        return self.report(loss=loss, **{self.quality: quality})
