"""`BidirectionalDualEncoder`: additive margin softmax both ways, hard negatives, length penalty (seed 004)."""

import gin
import tensorflow as tf

from tf_msemb.data.features import HardNegatives
from tf_msemb.losses.length_penalty import embedding_length_penalty
from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.objectives.base import accuracy
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.translation_ranking import TranslationRanking


@gin.configurable(denylist=["encoder"])
class BidirectionalDualEncoder(TranslationRanking):
    """One shared encoder; `L = L_ams(x -> y) + L_ams(y -> x) + lambda * ||e||` (seed 004 Eq. 8, Sec. 4.2).

    Every replica scores its pairs against the targets (and hard negatives)
    gathered from all replicas. Use a `SentenceEncoder` with
    `pooling=["max", "mean", "first", "attention"]` and `pooled_dim` for the
    paper's multi-pooling projection head.

    Args:
        encoder: tokens -> `[b, d]` (unnormalized; the loss normalizes).
        scale: logit scale applied to the margin-adjusted cosine.
        margin: additive margin m on the positive (0.3 in the paper).
        num_hard_negatives: extra targets per pair read from the TFRecord
            field `hard_negatives` (5 in the paper; 0 for none).
        length_penalty: lambda of the embedding length penalty (0 for none).
    """

    def __init__(self, encoder, scale=20.0, temperature=None, margin=0.3, num_hard_negatives=0, length_penalty=0.0,
                 **kwargs):
        super().__init__(encoder, scale=scale, temperature=temperature, margin=margin, **kwargs)
        self.num_hard_negatives = num_hard_negatives
        self.length_penalty = length_penalty
        self.add_trackers("length_penalty")

    @property
    def input_features(self):
        """Hard negatives as `[b, h, length]` tokens when `num_hard_negatives > 0`."""
        return [HardNegatives(self.num_hard_negatives)] if self.num_hard_negatives else []

    def _hard_negatives(self, tokens):
        """`[b, h, l]` tokens -> `[b * h, d]` raw embeddings."""
        flat = {key: tf.reshape(value, [-1, tf.shape(value)[-1]]) for key, value in tokens.items()}
        return self.encoder(flat, training=True)

    def train_step(self, data):
        with tf.GradientTape() as tape:
            raw_x = self.encoder(data["src"], training=True)
            raw_y = self.encoder(data["tgt"], training=True)
            x, y = l2_normalize(raw_x), l2_normalize(raw_y)
            local = [x, y]
            if self.num_hard_negatives:
                local.append(l2_normalize(self._hard_negatives(data["hard_negatives"])))
            gathered, labels = gather_candidates(*local)
            negatives = gathered[2] if self.num_hard_negatives else None
            ranking = bidirectional_ranking_loss(x, y, gathered[0], gathered[1], labels, self.scale, self.margin,
                                                 hard_negatives=negatives)
            penalty = embedding_length_penalty(tf.concat([raw_x, raw_y], axis=0), self.length_penalty)
            loss = ranking + penalty
            scaled_loss = self.loss_to_minimize(loss)
        self.minimize(tape, scaled_loss)
        return self.report(loss=loss, accuracy=accuracy(x, gathered[1], labels), length_penalty=penalty)
