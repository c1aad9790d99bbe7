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
from tf_msemb.objectives.gradient_cache import Tower
from tf_msemb.objectives.translation_ranking import TranslationRanking
from tf_msemb.objectives.translation_ranking import distinct_pairs_mask
from tf_msemb.objectives.translation_ranking import sentence_keys

SCORINGS = ("dot", "cosine")


@gin.configurable(denylist=["encoder"])
class BidirectionalDualEncoder(TranslationRanking):
    """One shared encoder; `L = L_ams(x -> y) + L_ams(y -> x) + lambda * ||e||` (seed 004 Eq. 8, Sec. 4.2).

    Every replica scores its pairs against the targets (and hard negatives)
    gathered from all replicas; a pair repeating another's source or target
    is no negative for it (`TranslationRanking`). A hard negative whose tokens equal one of the
    gathered targets is left out: mined for one pair, it can be another
    pair's translation, and as a candidate it would be a false negative. Use a `SentenceEncoder` with
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
            paper, footnote 3; 0 for none); `"dot"` scoring only.
        scoring: `"dot"`: `phi` is the dot product (Sec. 3.1) of the
            embeddings as the encoder gives them (unnormalized: the paper's
            footnote 3 penalizes their length), so the length penalty bounds
            it; `"cosine"`: `phi` is the cosine (LaBSE-style, with `scale`).
            A penalty is refused there: no score resists it, so it would
            only shrink the norms, and the step through the normalization
            grows as `1 / ||e||`.
        bidirectional: False trains `L(x -> y)` alone (Eq. 7; with
            `margin=0`, Eq. 3: Table 1's unidirectional DE baseline).
    """

    def __init__(self, encoder, scale=1.0, temperature=None, margin=0.3, num_hard_negatives=0, length_penalty=0.0,
                 scoring="dot", bidirectional=True, **kwargs):
        if scoring not in SCORINGS:
            raise ValueError(f"Unknown BidirectionalDualEncoder scoring {scoring!r}; choose from {SCORINGS}.")
        if scoring == "cosine" and length_penalty:
            raise ValueError(f"BidirectionalDualEncoder.length_penalty = {length_penalty} needs scoring = 'dot': "
                             "under cosine scoring nothing resists it and it only shrinks the norms.")
        run = kwargs.get("run")
        if scoring == "dot" and run is not None and run.matryoshka_widths:
            raise ValueError("train.matryoshka_widths needs BidirectionalDualEncoder.scoring = 'cosine': nested "
                             "vectors are re-normalized, so a dot product of them is a cosine.")
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

    @staticmethod
    def _flat(tokens):
        """`[b, h, l]` tokens -> `[b * h, l]`."""
        return {key: tf.reshape(value, [-1, tf.shape(value)[-1]]) for key, value in tokens.items()}

    def towers(self, data):
        """Sources, targets and (flattened) hard negatives, all through the one encoder."""
        towers = {"x": Tower(self.encoder, data["src"]), "y": Tower(self.encoder, data["tgt"])}
        if self.num_hard_negatives:
            towers["hard"] = Tower(self.encoder, self._flat(data["hard_negatives"]))
        return towers

    def batch_loss(self, embeddings, data):
        raw_x, raw_y = embeddings["x"], embeddings["y"]
        x, y = self._scored(raw_x), self._scored(raw_y)
        hard = [self._flat(data["hard_negatives"])] if self.num_hard_negatives else []
        keys = sentence_keys(data["src"], data["tgt"], *hard)
        local = [x, y, *keys[:2]]
        if self.num_hard_negatives:
            local += [self._scored(embeddings["hard"]), keys[2]]
        gathered, labels = gather_candidates(*local)
        distinct = distinct_pairs_mask(keys[:2], gathered[2:4], labels)
        negatives, kept = None, None
        if self.num_hard_negatives:
            negatives, hard_keys = gathered[4:]
            kept = tf.reduce_all(hard_keys[:, None] != gathered[3][None, :], axis=1)
        if self.bidirectional:
            ranking = bidirectional_ranking_loss(x, y, gathered[0], gathered[1], labels, self.scale, self.margin,
                                                 negatives, kept, distinct)
        else:
            ranking = forward_ranking_loss(x, gathered[1], labels, self.scale, self.margin, negatives, kept,
                                           distinct)
        penalty = embedding_length_penalty(tf.concat([raw_x, raw_y], axis=0), self.length_penalty)
        return {"loss": ranking + penalty, "accuracy": accuracy(x, gathered[1], labels), "length_penalty": penalty}
