"""`DualMomentumContrast`: two momentum encoders and two memory queues (seed 002, MoCo-BERT)."""

import gin
import keras
import tensorflow as tf

from tf_msemb.data.features import NliBatch
from tf_msemb.data.features import TargetTokens
from tf_msemb.losses.momentum_contrast import symmetric_queue_loss
from tf_msemb.losses.siamese import nli_softmax_loss
from tf_msemb.losses.siamese import pair_features
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.objectives.base import Objective
from tf_msemb.objectives.base import accuracy
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.gradient_cache import Tower
from tf_msemb.objectives.momentum import momentum_copy
from tf_msemb.objectives.momentum import momentum_update
from tf_msemb.objectives.queues import enqueue
from tf_msemb.objectives.queues import filled_slots


@gin.configurable(denylist=["encoder"])
class DualMomentumContrast(Objective):
    """Base encoders learn by ranking their translation's momentum key above a queue of old keys.

    Per step (seed 002 Sec. 2): `h_x`, `h_y` from the base encoder(s); keys
    from the momentum encoder(s), gathered over replicas; loss
    `L(x, y) + L(y, x)` (Eq. 2 with the y-queue, and with the x-queue); one
    optimizer step; then `theta_m <- m theta_m + (1 - m) theta` (Eq. 1) and
    the global batch's keys replace the oldest queue entries. Keys and
    queues get no gradient; momentum encoders run without dropout. Queues,
    their pointer and fill count are `keras.Variable`s, so checkpoints hold
    them. The base encoder(s) are exported: `encoder`, and `target` with
    separate encoders.

    Args:
        encoder: the base encoder of the source side (and of both sides
            unless `separate_encoders`).
        separate_encoders: one base and momentum encoder per side (the
            paper's two monolingual BERTs); without `target_pretrained` the
            target encoder starts as a copy of `encoder`, weights included.
        target_pretrained: a `load_pretrained` name or path for the target
            side (implies `separate_encoders`): its own encoder and its own
            tokenizer, which tokenizes `tgt` (`TargetTokens`) and is
            exported with it. Its width must equal `encoder`'s.
        momentum: m of Eq. 1 (0.999 in the paper).
        queue_size: K vectors per queue (409,600 in the paper; 0 for none).
        temperature: T of Eq. 2 (0.04 in the paper).
        in_batch_negatives: also use the other keys of the global batch as
            negatives (not in the paper; useful while the queue fills).
        nli_weight: alpha of the NLI multi-task loss (Appendix B Eq. 5;
            0.1 in the paper, 0 for none). Batches then carry `nli`, read
            from `nli_path` (SNLI / MultiNLI jsonl, `NliBatch`).
        nli_path: the NLI training file.
        nli_batch_size: global NLI batch (128 in the paper).
        nli_hidden, nli_dropout: the NLI head's hidden layer (256, ReLU) and
            its dropout (0.1); the head classifies `(u, v, |u - v|)` 3 ways.
    """

    def __init__(self, encoder, separate_encoders=False, target_pretrained=None, momentum=0.999, queue_size=65_536,
                 temperature=0.04, in_batch_negatives=False, nli_weight=0.0, nli_path=None, nli_batch_size=128,
                 nli_hidden=256, nli_dropout=0.1, **kwargs):
        super().__init__(ensure_built(encoder), **kwargs)
        if queue_size < 0 or (queue_size == 0 and not in_batch_negatives):
            raise ValueError(f"queue_size={queue_size} leaves no negatives; use a positive size or in_batch_negatives.")
        self.separate_encoders = separate_encoders or target_pretrained is not None
        self.target_tokenizer, self.target_encoder = self.run.tokenizer, encoder
        if target_pretrained is not None:
            self.target_tokenizer, self.target_encoder = load_pretrained(target_pretrained)
            ensure_built(self.target_encoder)
            if self.target_encoder.output_dim != encoder.output_dim:
                raise ValueError(f"DualMomentumContrast.target_pretrained {target_pretrained!r} gives "
                                 f"{self.target_encoder.output_dim}-wide vectors and the source encoder "
                                 f"{encoder.output_dim}-wide; both sides share the queues, so they must match.")
        elif separate_encoders:
            self.target_encoder = ensure_built(encoder.__class__.from_config(encoder.get_config()))
            self.target_encoder.set_weights(encoder.get_weights())
        self.target_pretrained = target_pretrained
        self.momentum = momentum
        self.queue_size = queue_size
        self.temperature = temperature
        self.in_batch_negatives = in_batch_negatives
        self.momentum_encoder = momentum_copy(self.encoder)
        self.target_momentum_encoder = (
            momentum_copy(self.target_encoder) if self.separate_encoders else self.momentum_encoder
        )
        dim = encoder.output_dim
        state = dict(trainable=False, aggregation="only_first_replica")
        self.queue_x = keras.Variable("zeros", shape=(queue_size, dim), dtype="float32", name="queue_x", **state)
        self.queue_y = keras.Variable("zeros", shape=(queue_size, dim), dtype="float32", name="queue_y", **state)
        self.queue_pointer = keras.Variable(0, dtype="int32", name="queue_pointer", **state)
        self.queue_filled = keras.Variable(0, dtype="int32", name="queue_filled", **state)
        self.nli_weight = nli_weight
        self.nli_path = nli_path
        self.nli_batch_size = nli_batch_size
        if nli_weight:
            self.nli_head = keras.Sequential(
                [
                    keras.layers.Dense(nli_hidden, activation="relu", name="nli_hidden"),
                    keras.layers.Dropout(nli_dropout),
                    keras.layers.Dense(3, name="nli_classifier"),
                ],
                name="nli_head",
            )
            self.nli_head.build((None, 3 * dim))
        self.add_trackers("loss", "accuracy", *(["nli_loss"] if nli_weight else []))

    @property
    def input_features(self):
        """`tgt` in the target tokenizer with `target_pretrained`; an NLI batch when the multi-task head is on."""
        features = [TargetTokens(self.target_tokenizer)] if self.target_pretrained is not None else []
        return features + ([NliBatch(self.nli_path, self.nli_batch_size)] if self.nli_weight else [])

    def exports(self):
        """The source-side base encoder; with separate encoders also the target side's (with its tokenizer)."""
        exports = super().exports()
        if self.separate_encoders:
            exports["target"] = (self.target_tokenizer, self.target_encoder)
        return exports

    def call(self, inputs, training=False):
        return l2_normalize(self.encoder(inputs, training=training))

    def contrastive_loss(self, data, training=True):
        """Eq. 2 both ways against the queues, plus alpha times the NLI loss (Eq. 5).

        Returns `{"loss", "accuracy", "keys_x", "keys_y"[, "nli_loss"]}`; the
        keys (momentum encoders, gathered over replicas) carry no gradient.
        """
        embeddings = {name: tower.embed(training) for name, tower in self.towers(data).items()}
        return self.batch_loss(embeddings, data, training)

    def towers(self, data):
        """The base encoders' queries of both sides (and the NLI pairs' sentences).

        Keys are no tower: they carry no gradient, and `batch_loss` runs the
        momentum encoders over the local batch at once (no tape, so their
        activations are transient, but a gradient-cached step's peak memory
        includes one local batch through them).
        """
        towers = {"x": Tower(self.encoder, data["src"]), "y": Tower(self.target_encoder, data["tgt"])}
        if self.nli_weight:
            towers.update(premise=Tower(self.encoder, data["nli"]["a"]),
                          hypothesis=Tower(self.encoder, data["nli"]["b"]))
        return towers

    def batch_loss(self, embeddings, data, training=True):
        key_x = tf.stop_gradient(l2_normalize(self.momentum_encoder(data["src"], training=False)))
        key_y = tf.stop_gradient(l2_normalize(self.target_momentum_encoder(data["tgt"], training=False)))
        (keys_x, keys_y), labels = gather_candidates(key_x, key_y)
        valid = filled_slots(self.queue_x, self.queue_filled)
        h_x, h_y = l2_normalize(embeddings["x"]), l2_normalize(embeddings["y"])
        queue_x, queue_y = tf.stop_gradient(self.queue_x.value), tf.stop_gradient(self.queue_y.value)
        loss = symmetric_queue_loss(h_x, h_y, keys_x, keys_y, labels, queue_x, queue_y, self.temperature, valid,
                                    self.in_batch_negatives)
        results = {"accuracy": accuracy(h_x, keys_y, labels), "keys_x": keys_x, "keys_y": keys_y}
        if self.nli_weight:
            # App. B: the head classifies the sentence representations, L2-normalized as in Eq. 2.
            premise, hypothesis = l2_normalize(embeddings["premise"]), l2_normalize(embeddings["hypothesis"])
            logits = self.nli_head(pair_features(premise, hypothesis), training=training)
            results["nli_loss"] = nli_softmax_loss(logits, data["nli"]["target"])
            loss = loss + self.nli_weight * results["nli_loss"]
        return {"loss": loss, **results}

    def _update_momentum_encoders(self, read_first):
        with tf.control_dependencies(read_first):
            momentum_update(self.momentum_encoder, self.encoder, self.momentum)
            if self.separate_encoders:
                momentum_update(self.target_momentum_encoder, self.target_encoder, self.momentum)

    def train_step(self, data):
        results = self.embedding_step(data)
        keys = results.pop("keys_x"), results.pop("keys_y")
        # After this step's keys and loss, explicitly: without it, about 1 one-device step in 12 (2 inter-op
        # threads, a loaded CPU) scored against momentum weights being updated; 0 in 120 with it.
        self.after_update(lambda: self._update_momentum_encoders([*keys, results["loss"]]))
        if self.queue_size:
            enqueue((self.queue_x, self.queue_y), keys, self.queue_pointer, self.queue_filled)
        return self.report(**results)
