"""`MultilingualDistillation`: a fixed teacher's vectors for both sides of a pair (seed 001)."""

import gin
import keras
import tensorflow as tf

from tf_msemb.data.features import TeacherNegatives
from tf_msemb.data.features import TeacherTokens
from tf_msemb.data.features import TeacherVectors
from tf_msemb.losses.distillation import multilingual_distillation_loss
from tf_msemb.losses.distillation import teacher_ranking_loss
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.models.teacher import load_teacher
from tf_msemb.objectives.base import Objective
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.queues import enqueue
from tf_msemb.objectives.queues import filled_slots


@gin.configurable(denylist=["encoder"])
class MultilingualDistillation(Objective):
    """Student S learns `S(s) ~ T(s)` and `S(t) ~ T(s)` for translation pairs (s, t); optionally S(t) also ranks
    T(s) first among the teacher vectors of every source in the batch (`teacher_ranking_loss`).

    Batches hold `src`/`tgt` student tokens and either `teacher` (vectors
    precomputed into the TFRecords, `tools/precompute_teacher.py`) or
    `teacher_src` (the source in the teacher's own tokens, for a live teacher).

    Args:
        encoder: the student.
        teacher: a name or path for `load_teacher` (live teacher: its own
            tokenizer, pooling and width), or None to read precomputed vectors.
        teacher_dim: width of the precomputed vectors (needed without a live teacher).
        teacher_prompt: a live teacher's prompt (`load_teacher`; None: its checkpoint's default); precomputed
            vectors take theirs from `tools/precompute_teacher.py --prompt`.
        projection: `"dense"` adds a learned projection when the student's
            width differs from the teacher's; `"error"` refuses instead.
        ranking_weight: w in `L = L_mse + w L_rank` (0: seed 001's loss alone). The
            MSE holds each translation near its source's teacher vector; the
            ranking separates it from the other sources' (gathered across
            replicas), which margin mining needs, without moving English.
        ranking_scale, ranking_margin: `L_rank`'s cosine scale and additive
            margin (seed 004 Eq. 7's m).
        ranking_queue_size: teacher vectors of earlier batches' sources kept
            as extra candidates (0: the batch's alone). Teacher vectors are
            fixed, so unlike seed 002's momentum keys they never go stale; a
            large queue holds near-miss sentences that a batch rarely does.
        ranking_hard_negatives: teacher vectors of sentences near each source
            in the teacher's space, read from the records' `teacher_negatives`
            (`tools/mine_teacher_negatives.py`; 0: none), joined to every
            translation's candidates (gathered across replicas). Seed 004
            (Sec. 4.2) appends 5 hard negatives to each example, on the target
            side; here they are English teacher vectors, the side ranked
            against, and every pair's negatives are candidates for every
            translation (hard for their own pair, ordinary for the others).
            They are the near misses margin mining must reject.
        ranking_sources: the sources' student vectors S(s) rank their own
            teacher vectors among the same candidates too (False: only the
            translations are ranked). The MSE holds S(s) near T(s); the
            ranking parts it from the teacher vectors of its neighbours (its
            paraphrases), which the MSE alone leaves as near as a translation.
    """

    def __init__(self, encoder, teacher=None, teacher_dim=None, projection="dense", teacher_prompt=None,
                 ranking_weight=0.0, ranking_scale=20.0, ranking_margin=0.3, ranking_queue_size=0,
                 ranking_hard_negatives=0, ranking_sources=False, **kwargs):
        super().__init__(encoder, **kwargs)
        if teacher is None and teacher_dim is None:
            raise ValueError(
                "MultilingualDistillation needs a live `teacher` (name or path) or the `teacher_dim` of "
                "precomputed teacher vectors."
            )
        self.teacher_tokenizer, self.teacher = (None, None)
        if teacher is not None:
            self.teacher_tokenizer, self.teacher = load_teacher(teacher, teacher_prompt)
            self.teacher.trainable = False
            if teacher_dim is not None and teacher_dim != self.teacher.output_dim:
                raise ValueError(f"teacher_dim={teacher_dim} but teacher {teacher!r} outputs {self.teacher.output_dim}.")
            teacher_dim = self.teacher.output_dim
        self.teacher_dim = teacher_dim
        if encoder.output_dim != teacher_dim:
            if projection != "dense":
                raise ValueError(
                    f"Student width {encoder.output_dim} differs from teacher width {teacher_dim}; set "
                    "MultilingualDistillation.projection = 'dense' to learn a projection."
                )
            encoder = ProjectedEncoder(encoder, teacher_dim, name="projected_student")
        self.encoder = encoder
        self.ranking_weight = ranking_weight
        self.ranking_scale = ranking_scale
        self.ranking_margin = ranking_margin
        self.ranking_queue_size = ranking_queue_size
        self.ranking_hard_negatives = ranking_hard_negatives
        self.ranking_sources = ranking_sources
        for name, value, role in (("ranking_queue_size", ranking_queue_size, "candidates"),
                                  ("ranking_hard_negatives", ranking_hard_negatives, "candidates"),
                                  ("ranking_sources", ranking_sources, "queries")):
            if value and not ranking_weight:
                raise ValueError(f"MultilingualDistillation.{name} = {value} needs a ranking_weight > 0: it only "
                                 f"adds {role} to the ranking loss.")
        if ranking_hard_negatives and self.teacher is not None:
            raise ValueError("MultilingualDistillation.ranking_hard_negatives reads precomputed teacher negatives; "
                             "set teacher = None and train on records from tools/mine_teacher_negatives.py.")
        if ranking_queue_size:
            state = dict(trainable=False, aggregation="only_first_replica")
            self.ranking_queue = keras.Variable("zeros", shape=(ranking_queue_size, teacher_dim), dtype="float32",
                                                name="ranking_queue", **state)
            self.queue_pointer = keras.Variable(0, dtype="int32", name="queue_pointer", **state)
            self.queue_filled = keras.Variable(0, dtype="int32", name="queue_filled", **state)
        self.add_trackers("loss", "mse_src", "mse_tgt", *(["ranking"] if ranking_weight else []))

    @property
    def input_features(self):
        """Precomputed teacher vectors (and their negatives), or the source in a live teacher's tokens."""
        if self.teacher is not None:
            return [TeacherTokens(self.teacher_tokenizer)]
        negatives = [TeacherNegatives(self.ranking_hard_negatives, self.teacher_dim)] if self.ranking_hard_negatives else []
        return [TeacherVectors(self.teacher_dim), *negatives]

    def build(self, inputs_shape=None):
        ensure_built(self.encoder)
        if self.teacher is not None:
            ensure_built(self.teacher)
        self.built = True

    def teacher_vectors(self, data):
        if self.teacher is None:
            return data["teacher"]
        return tf.stop_gradient(self.teacher(data["teacher_src"], training=False))

    def train_step(self, data):
        target = self.teacher_vectors(data)
        with tf.GradientTape() as tape:
            student_src = self.encoder(data["src"], training=True)
            student_tgt = self.encoder(data["tgt"], training=True)
            loss, src, tgt = multilingual_distillation_loss(target, student_src, student_tgt)
            parts = {"mse_src": src, "mse_tgt": tgt}
            if self.ranking_weight:
                negatives = [data["teacher_negatives"]] if self.ranking_hard_negatives else []
                (candidates, *negatives), labels = gather_candidates(target, *negatives)
                queries = student_tgt
                if self.ranking_sources:
                    queries, labels = tf.concat([student_tgt, student_src], axis=0), tf.concat([labels, labels], axis=0)
                parts["ranking"] = self._ranking_loss(queries, [candidates, *negatives], labels)
                loss = loss + self.ranking_weight * parts["ranking"]
            scaled_loss = self.loss_to_minimize(loss)
        self.minimize(tape, scaled_loss, self.encoder.trainable_variables)
        if self.ranking_queue_size:
            enqueue((self.ranking_queue,), (candidates,), self.queue_pointer, self.queue_filled)
        return self.report(loss=loss, **parts)

    def _ranking_loss(self, queries, candidates, labels):
        """`teacher_ranking_loss` against the batch's teacher vectors, their negatives, then the queue's filled slots."""
        candidates = tf.concat([tf.reshape(tf.cast(c, tf.float32), [-1, self.teacher_dim]) for c in candidates], axis=0)
        valid = None
        if self.ranking_queue_size:
            valid = tf.concat([tf.ones([tf.shape(candidates)[0]], tf.bool),
                               filled_slots(self.ranking_queue, self.queue_filled)], axis=0)
            candidates = tf.concat([candidates, self.ranking_queue.value], axis=0)
        return teacher_ranking_loss(queries, candidates, labels, self.ranking_scale, self.ranking_margin, valid)

    def get_config(self):
        config = super().get_config()
        student = self.encoder.encoder if isinstance(self.encoder, ProjectedEncoder) else self.encoder
        config["encoder"] = keras.saving.serialize_keras_object(student)
        return config
