import numpy as np
import pytest

from tf_msemb.losses.distillation import distillation_mse
from tf_msemb.losses.distillation import multilingual_distillation_loss


def test_by_hand():
    target = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    prediction = np.array([[0.0, 0.0], [0.0, 0.0]], np.float32)
    # rows: 1 and 4 -> mean 2.5
    assert float(distillation_mse(target, prediction)) == pytest.approx(2.5)


def test_matches_numpy_and_sums_both_sides():
    rng = np.random.default_rng(0)
    t, s, u = (rng.normal(size=(5, 7)).astype(np.float32) for _ in range(3))
    total, src, tgt = multilingual_distillation_loss(t, s, u)
    assert float(src) == pytest.approx(np.mean(np.sum((t - s) ** 2, axis=1)), rel=1e-5)
    assert float(tgt) == pytest.approx(np.mean(np.sum((t - u) ** 2, axis=1)), rel=1e-5)
    assert float(total) == pytest.approx(float(src) + float(tgt), rel=1e-6)


def test_no_gradient_into_the_target():
    import tensorflow as tf

    t = tf.Variable([[1.0, 2.0]])
    s = tf.Variable([[0.0, 0.0]])
    with tf.GradientTape() as tape:
        loss = distillation_mse(t, s)
    grad_t, grad_s = tape.gradient(loss, [t, s])
    assert grad_t is None or not np.any(grad_t.numpy())
    np.testing.assert_allclose(grad_s.numpy(), [[-2.0, -4.0]])


def _numpy_teacher_ranking(student, teacher, labels, scale, margin, left_out=()):
    q = student / np.linalg.norm(student, axis=1, keepdims=True)
    c = teacher / np.linalg.norm(teacher, axis=1, keepdims=True)
    losses = []
    for i, label in enumerate(labels):
        logits = scale * (q[i] @ c.T)
        logits[label] -= scale * margin
        kept = [j for j in range(len(c)) if (i, j) not in left_out]
        losses.append(np.log(np.sum(np.exp(logits[kept]))) - logits[label])
    return np.mean(losses)


def test_teacher_ranking_against_numpy_leaves_out_the_positives_duplicates():
    from tf_msemb.losses.distillation import teacher_ranking_loss

    rng = np.random.default_rng(1)
    student = rng.normal(size=(3, 6)).astype(np.float32)
    teacher = rng.normal(size=(5, 6)).astype(np.float32)
    teacher[4] = 3.0 * teacher[0]  # query 0's English sentence again (paired with another language): not a negative
    labels = np.array([0, 1, 2])
    got = float(teacher_ranking_loss(student, teacher, labels, scale=20.0, margin=0.3))
    assert got == pytest.approx(_numpy_teacher_ranking(student, teacher, labels, 20.0, 0.3, {(0, 4)}), rel=1e-5)
    # Kept as a negative it would change the loss: the mask is what passes the line above.
    assert got != pytest.approx(_numpy_teacher_ranking(student, teacher, labels, 20.0, 0.3), rel=1e-3)


def test_teacher_ranking_moves_only_the_students_translations():
    import tensorflow as tf

    from tf_msemb.losses.distillation import teacher_ranking_loss

    rng = np.random.default_rng(2)
    student = tf.Variable(rng.normal(size=(4, 6)).astype(np.float32))
    teacher = tf.Variable(rng.normal(size=(4, 6)).astype(np.float32))
    with tf.GradientTape() as tape:
        loss = teacher_ranking_loss(student, teacher, np.arange(4), scale=20.0, margin=0.3)
    grad_s, grad_t = tape.gradient(loss, [student, teacher])
    assert grad_t is None or not np.any(grad_t.numpy())
    assert np.any(grad_s.numpy())
