"""Distillation MSE: how close a student's vectors are to its teacher's on held-out parallel sentences.

Seed 001 (Sec. 3) uses the training loss on held-out parallel sentences as its
development set; this is that loss (Sec. 2, Eq. 1) on the vectors the export gives.
"""

import functools

import gin
import tensorflow as tf

from tf_msemb.evaluation.encoding import Memoized
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.retrieval import aligned_sets
from tf_msemb.losses.distillation import distillation_mse
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.models.teacher import load_teacher


def teacher_embed(teacher, batch_size=64, prompt=None):
    """`embed` of a teacher: a callable as it is; else an export directory or training model_dir
    (`encoding.load_model`), or failing that a `models.teacher.load_teacher` name or directory
    with `prompt` (its vectors L2-normalized, as an export's are)."""
    if callable(teacher):
        return teacher
    try:
        model = load_model(teacher)
    except FileNotFoundError as not_an_export:
        try:
            tokenizer, encoder = load_teacher(teacher, prompt)
        except (ValueError, OSError) as not_pretrained:
            reason = str(not_pretrained).strip().splitlines()[0] if str(not_pretrained).strip() else "unknown"
            raise FileNotFoundError(f"Teacher {teacher!r} is neither an export ({not_an_export}) nor a pretrained "
                                    f"model ({reason}).") from None
        model = tf.function(lambda texts: l2_normalize(encoder(tokenizer(texts), training=False)),
                            reduce_retracing=True)
    return functools.partial(encode, model, batch_size=batch_size, verbose=False)


@gin.configurable(module="tf_msemb.evaluation")
class DistillationMSE(Evaluator):
    """Seed 001's development metric: the multilingual distillation loss on held-out pairs `(s_j, t_j)`.

    With teacher T and student S: `mse_src` = mean_j ||T(s_j) - S(s_j)||^2,
    `mse_tgt` = mean_j ||T(s_j) - S(t_j)||^2 (a translation is pulled to the
    teacher's vector of its source), and `mse` = their sum, Eq. 1 (squared
    L2 per pair, mean over pairs, as `losses.distillation.distillation_mse`).
    Lower is better: select with `train.best_mode = "min"`.

    Both sides are unit vectors: an export gives normalized vectors only, so
    the raw student output the training loss saw is not available. With the
    teacher normalized too, each term is 2 - 2 cos(T(s_j), S(x_j)), which
    does not depend on vector norms, so exports of any step (and teachers of
    any scale) compare.

    Args:
        pairs: `(source file, target file)` pairs of line-aligned held-out text.
        teacher: an `embed`-like callable (strings -> unit vectors), an export
            directory or training model_dir, or a `load_teacher` name or
            directory (see `teacher_embed`). Its vectors of every source side
            are computed here, once; the teacher is not kept.
        batch_size: sentences per teacher batch.
        teacher_prompt: a pretrained teacher's prompt (`load_teacher`; None: its checkpoint's default).
        name: the metric prefix.
    """

    def __init__(self, pairs, teacher, batch_size=64, teacher_prompt=None, name="distillation"):
        self.name = name
        self.sets = aligned_sets(pairs, "DistillationMSE.pairs")
        embed_teacher = Memoized(teacher_embed(teacher, batch_size, teacher_prompt))  # the source side is often shared
        self.teacher_vectors = {name: embed_teacher(src) for name, (src, _) in self.sets.items()}

    def evaluate(self, embed):
        results = {}
        for name, (src, tgt) in self.sets.items():
            teacher = self.teacher_vectors[name]
            student_src, student_tgt = embed(src), embed(tgt)
            if student_src.shape[1] != teacher.shape[1]:
                raise ValueError(f"Student vectors have {student_src.shape[1]} dimensions but the teacher's have "
                                 f"{teacher.shape[1]}.")
            mse_src = float(distillation_mse(teacher, student_src))
            mse_tgt = float(distillation_mse(teacher, student_tgt))
            results[name] = {"mse_src": mse_src, "mse_tgt": mse_tgt, "mse": mse_src + mse_tgt, "size": len(src)}
        return results
