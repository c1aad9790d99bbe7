"""`TranslationRanking`: bidirectional in-batch softmax over translation pairs."""

import gin
import tensorflow as tf

from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.objectives.base import Objective
from tf_msemb.objectives.base import accuracy
from tf_msemb.objectives.cross_replica import gather_candidates


@gin.configurable(denylist=["encoder"])
class TranslationRanking(Objective):
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
        super().__init__(encoder, **kwargs)
        self.scale = 1.0 / temperature if temperature else scale
        self.margin = margin
        self.add_trackers("loss", "accuracy")

    def call(self, inputs, training=False):
        return l2_normalize(self.encoder(inputs, training=training))

    def train_step(self, data):
        with tf.GradientTape() as tape:
            x = self(data["src"], training=True)
            y = self(data["tgt"], training=True)
            (x_all, y_all), labels = gather_candidates(x, y)
            loss = bidirectional_ranking_loss(x, y, x_all, y_all, labels, self.scale, self.margin)
            scaled_loss = self.loss_to_minimize(loss)
        self.minimize(tape, scaled_loss)
        return self.report(loss=loss, accuracy=accuracy(x, y_all, labels))
