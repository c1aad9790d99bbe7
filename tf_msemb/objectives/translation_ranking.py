"""`TranslationRanking`: bidirectional in-batch softmax over translation pairs."""

import gin
import tensorflow as tf

from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.losses.translation_ranking import duplicate_candidates_mask
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.objectives.base import Objective
from tf_msemb.objectives.base import accuracy
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.gradient_cache import Tower


# Two polynomial hashes of a row's tokens, each modulo a prime below 2^31 (every product fits in int64), joined
# into one int64 key: rows that differ collide with a chance of about 2^-62. Made of integer ops XLA compiles
# (`tf.fingerprint` has no XLA kernel).
_HASHES = ((2_147_483_647, 1_000_003), (2_147_483_629, 998_244_353))
_POSITION_BITS = 20  # rows up to a million tokens


def _powers(length, prime, base):
    """`base ** j mod prime` for `j < length` (int64), by binary exponentiation of the positions."""
    positions = tf.range(tf.cast(length, tf.int64), dtype=tf.int64)
    power, square = tf.ones_like(positions), tf.constant(base % prime, tf.int64)
    for bit in range(_POSITION_BITS):
        power = tf.where(tf.bitwise.bitwise_and(tf.bitwise.right_shift(positions, bit), 1) == 1,
                         tf.math.floormod(power * square, prime), power)
        square = tf.math.floormod(square * square, prime)
    return power


def sentence_keys(*batches):
    """One int64 key per row of each `{"token_ids", "padding_mask"}` batch: equal rows (padding aside), equal keys.

    A row's key is the hash of its tokens shifted by one, padding as zeros that add nothing, so a sentence padded
    differently in two batches gets the same key.
    """
    keys = []
    for tokens in batches:
        ids = tf.where(tf.cast(tokens["padding_mask"], tf.bool), tf.cast(tokens["token_ids"], tf.int64) + 1, 0)
        length = tf.shape(ids)[1]
        parts = [tf.math.floormod(tf.reduce_sum(tf.math.floormod(ids * _powers(length, prime, base)[None, :], prime),
                                                axis=1), prime) for prime, base in _HASHES]
        keys.append(parts[0] * _HASHES[1][0] + parts[1])
    return keys


def distinct_pairs_mask(keys, gathered_keys, labels):
    """`[b, n]` bool: False where gathered pair `j` repeats pair `i`'s source or its target (`keys`: this
    replica's `(source keys, target keys)`, `gathered_keys` the same over all replicas), `i`'s own pair kept."""
    masks = [duplicate_candidates_mask(own, gathered, labels) for own, gathered in zip(keys, gathered_keys)]
    return tf.logical_and(*masks)


@gin.configurable(denylist=["encoder"])
class TranslationRanking(Objective):
    """Trains `encoder` so each sentence ranks its translation first.

    Batches are `{"src": tokens, "tgt": tokens}`. Under a strategy, every
    replica scores its sentences against the whole global batch. A pair
    whose source or target repeats another's in the global batch (one
    English sentence with several languages) is no negative for it, either
    way (`distinct_pairs_mask`).

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
        keys = sentence_keys(data["src"], data["tgt"])
        (x_all, y_all, *gathered_keys), labels = gather_candidates(x, y, *keys)
        loss = bidirectional_ranking_loss(x, y, x_all, y_all, labels, self.scale, self.margin,
                                          candidate_mask=distinct_pairs_mask(keys, gathered_keys, labels))
        return {"loss": loss, "accuracy": accuracy(x, y_all, labels)}

    def train_step(self, data):
        return self.report(**self.embedding_step(data))
