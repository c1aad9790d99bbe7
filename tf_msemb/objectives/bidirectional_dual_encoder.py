"""`BidirectionalDualEncoder`: additive margin softmax both ways, hard negatives, length penalty (seed 004)."""

import gin
import tensorflow as tf

from tf_msemb.data.features import HardNegatives
from tf_msemb.losses.length_penalty import embedding_length_penalty
from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.losses.translation_ranking import forward_ranking_loss
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.objectives.base import accuracy
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.translation_ranking import TranslationRanking

SCORINGS = ("dot", "cosine")


@gin.configurable(denylist=["encoder"])
class BidirectionalDualEncoder(TranslationRanking):
    """One shared encoder; `L = L_ams(x -> y) + L_ams(y -> x) + lambda * ||e||` (seed 004 Eq. 8, Sec. 4.2).

    Every replica scores its pairs against the targets (and hard negatives)
    gathered from all replicas. Use a `SentenceEncoder` with
    `pooling=["max", "mean", "first", "attention"]` and `pooled_dim` for the
    paper's multi-pooling projection head.

    Args:
        encoder: tokens -> `[b, d]` unnormalized embeddings.
        scale: logits are `scale * (phi - m)` on the positive, `scale * phi`
            elsewhere (1 for the paper's dot product; e.g. 20 for cosine).
        margin: additive margin m on the positive (0.3 in the paper).
        num_hard_negatives: extra targets per pair read from the TFRecord
            field `hard_negatives` (5 in the paper; 0 for none).
        length_penalty: lambda of the embedding length penalty (11 in the
            paper, footnote 3; 0 for none).
        scoring: `"dot"`: `phi` is the dot product of the raw embeddings, as
            the paper scores (Sec. 3.1), so the length penalty bounds it;
            `"cosine"`: `phi` is the cosine (LaBSE-style, with `scale`), which
            no length penalty can change.
        bidirectional: False trains `L(x -> y)` alone (Eq. 7; with
            `margin=0`, Eq. 3: Table 1's unidirectional DE baseline).
    """

    def __init__(self, encoder, scale=1.0, temperature=None, margin=0.3, num_hard_negatives=0, length_penalty=0.0,
                 scoring="dot", bidirectional=True, **kwargs):
        if scoring not in SCORINGS:
            raise ValueError(f"Unknown BidirectionalDualEncoder scoring {scoring!r}; choose from {SCORINGS}.")
        super().__init__(encoder, scale=scale, temperature=temperature, margin=margin, **kwargs)
        self.num_hard_negatives = num_hard_negatives
        self.length_penalty = length_penalty
        self.scoring = scoring
        self.bidirectional = bidirectional
        self.add_trackers("length_penalty")

    @property
    def input_features(self):
        """Hard negatives as `[b, h, length]` tokens when `num_hard_negatives > 0`."""
        return [HardNegatives(self.num_hard_negatives)] if self.num_hard_negatives else []

    def _scored(self, embeddings):
        """What `phi` multiplies: the raw embeddings (dot) or their unit vectors (cosine)."""
        return embeddings if self.scoring == "dot" else l2_normalize(embeddings)

    def _hard_negatives(self, tokens):
        """`[b, h, l]` tokens -> `[b * h, d]` raw embeddings."""
        flat = {key: tf.reshape(value, [-1, tf.shape(value)[-1]]) for key, value in tokens.items()}
        return self.encoder(flat, training=True)

    def train_step(self, data):
        with tf.GradientTape() as tape:
            raw_x = self.encoder(data["src"], training=True)
            raw_y = self.encoder(data["tgt"], training=True)
            x, y = self._scored(raw_x), self._scored(raw_y)
            local = [x, y]
            if self.num_hard_negatives:
                local.append(self._scored(self._hard_negatives(data["hard_negatives"])))
            gathered, labels = gather_candidates(*local)
            negatives = gathered[2] if self.num_hard_negatives else None
            if self.bidirectional:
                ranking = bidirectional_ranking_loss(x, y, gathered[0], gathered[1], labels, self.scale, self.margin,
                                                     hard_negatives=negatives)
            else:
                ranking = forward_ranking_loss(x, gathered[1], labels, self.scale, self.margin, negatives)
            penalty = embedding_length_penalty(tf.concat([raw_x, raw_y], axis=0), self.length_penalty)
            loss = ranking + penalty
            scaled_loss = self.loss_to_minimize(loss)
        self.minimize(tape, scaled_loss)
        return self.report(loss=loss, accuracy=accuracy(x, gathered[1], labels), length_penalty=penalty)
