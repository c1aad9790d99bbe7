"""`TranslationRanking`: bidirectional in-batch softmax over translation pairs."""

import gin

from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.objectives.base import Objective
from tf_msemb.objectives.base import accuracy
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.gradient_cache import Tower


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

    nests = True

    def __init__(self, encoder, scale=20.0, temperature=None, margin=0.0, **kwargs):
        super().__init__(encoder, **kwargs)
        self.scale = 1.0 / temperature if temperature else scale
        self.margin = margin
        self.add_trackers("loss", "accuracy")

    def call(self, inputs, training=False):
        return l2_normalize(self.encoder(inputs, training=training))

    def towers(self, data):
        """Both sides through the one encoder."""
        return {"x": Tower(self.encoder, data["src"]), "y": Tower(self.encoder, data["tgt"])}

    def batch_loss(self, embeddings, data):
        x, y = l2_normalize(embeddings["x"]), l2_normalize(embeddings["y"])
        (x_all, y_all), labels = gather_candidates(x, y)
        loss = bidirectional_ranking_loss(x, y, x_all, y_all, labels, self.scale, self.margin)
        return {"loss": loss, "accuracy": accuracy(x, y_all, labels)}

    def train_step(self, data):
        return self.report(**self.embedding_step(data))
