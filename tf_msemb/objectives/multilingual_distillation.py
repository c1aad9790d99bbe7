"""`MultilingualDistillation`: a fixed teacher's vectors for both sides of a pair (seed 001)."""

import gin
import keras
import tensorflow as tf

from tf_msemb.losses.distillation import multilingual_distillation_loss
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.objectives.cross_replica import num_replicas


@gin.configurable(denylist=["encoder"])
class MultilingualDistillation(keras.Model):
    """Student S learns `S(s) ~ T(s)` and `S(t) ~ T(s)` for translation pairs (s, t).

    Batches hold `src`/`tgt` student tokens and either `teacher` (vectors
    precomputed into the TFRecords, `tools/precompute_teacher.py`) or
    `teacher_src` (the source in the teacher's own tokens, for a live teacher).

    Args:
        encoder: the student.
        teacher: a name or path for `load_pretrained` (live teacher), or None
            to read precomputed vectors.
        teacher_dim: width of the precomputed vectors (needed without a live teacher).
        projection: `"dense"` adds a learned projection when the student's
            width differs from the teacher's; `"error"` refuses instead.
    """

    def __init__(self, encoder, teacher=None, teacher_dim=None, projection="dense", **kwargs):
        super().__init__(**kwargs)
        if teacher is None and teacher_dim is None:
            raise ValueError(
                "MultilingualDistillation needs a live `teacher` (name or path) or the `teacher_dim` of "
                "precomputed teacher vectors."
            )
        self.teacher_tokenizer, self.teacher = (None, None)
        if teacher is not None:
            self.teacher_tokenizer, self.teacher = load_pretrained(teacher)
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
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.src_tracker = keras.metrics.Mean(name="mse_src")
        self.tgt_tracker = keras.metrics.Mean(name="mse_tgt")

    def data_options(self):
        """What the input pipeline must add to each batch for this objective."""
        if self.teacher is None:
            return {"teacher_dim": self.teacher_dim}
        return {"teacher_tokenizer": self.teacher_tokenizer}

    def build(self, inputs_shape=None):
        ensure_built(self.encoder)
        if self.teacher is not None:
            ensure_built(self.teacher)
        self.built = True

    @property
    def metrics(self):
        return [self.loss_tracker, self.src_tracker, self.tgt_tracker]

    def call(self, inputs, training=False):
        return self.encoder(inputs, training=training)

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
            scaled_loss = loss / num_replicas()
        gradients = tape.gradient(scaled_loss, self.encoder.trainable_variables)
        self.optimizer.apply(gradients, self.encoder.trainable_variables)
        self.loss_tracker.update_state(loss)
        self.src_tracker.update_state(src)
        self.tgt_tracker.update_state(tgt)
        return {m.name: m.result() for m in self.metrics}
