import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.losses.length_penalty import embedding_length_penalty
from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss


def test_weighted_mean_norm_by_hand():
    e = np.array([[3.0, 4.0], [0.0, 1.0]], np.float32)
    assert float(embedding_length_penalty(e, 0.5)) == pytest.approx(0.5 * (5.0 + 1.0) / 2)
    assert float(embedding_length_penalty(e, 0.0)) == 0.0


def _raw_pairs(seed=0, n=6, d=8):
    rng = np.random.default_rng(seed)
    scales = rng.uniform(0.5, 3.0, size=(2, n, 1))
    return [tf.constant(s * rng.normal(size=(n, d)), tf.float32) for s in scales]


def _penalty_step(x, y, weight=11.0, learning_rate=0.05):
    """One gradient step on the penalty alone: every row shrinks along itself."""
    with tf.GradientTape() as tape:
        tape.watch([x, y])
        penalty = embedding_length_penalty(tf.concat([x, y], 0), weight)
    grad_x, grad_y = tape.gradient(penalty, [x, y])
    return x - learning_rate * grad_x, y - learning_rate * grad_y


def test_penalty_changes_dot_product_scores():
    x, y = _raw_pairs()
    shrunk_x, shrunk_y = _penalty_step(x, y)
    labels = np.arange(6)
    before = float(bidirectional_ranking_loss(x, y, x, y, labels, scale=1.0, margin=0.3))
    after = float(bidirectional_ranking_loss(shrunk_x, shrunk_y, shrunk_x, shrunk_y, labels, scale=1.0, margin=0.3))
    assert abs(after - before) > 1e-2
    assert not np.allclose((shrunk_x @ tf.transpose(shrunk_y)).numpy(), (x @ tf.transpose(y)).numpy(), atol=1e-3)


def test_penalty_cannot_change_cosine_scores():
    x, y = _raw_pairs(1)
    unit = lambda v: tf.math.l2_normalize(v, axis=-1)  # noqa: E731
    labels = np.arange(6)
    # The penalty's step only rescales rows, which normalization divides out ...
    shrunk_x, shrunk_y = _penalty_step(x, y)
    np.testing.assert_allclose(unit(shrunk_x) @ tf.transpose(unit(shrunk_y)), unit(x) @ tf.transpose(unit(y)),
                               atol=1e-6)
    # ... and the cosine loss's gradient is orthogonal to every raw embedding: nothing in it holds the norms up
    # against the penalty (why BidirectionalDualEncoder refuses a penalty under cosine scoring).
    with tf.GradientTape() as tape:
        tape.watch([x, y])
        loss = bidirectional_ranking_loss(unit(x), unit(y), unit(x), unit(y), labels, scale=20.0, margin=0.3)
    for raw, grad in zip([x, y], tape.gradient(loss, [x, y])):
        radial = tf.reduce_sum(raw * grad, axis=1) / tf.norm(raw, axis=1) / tf.norm(grad, axis=1)
        np.testing.assert_allclose(radial, 0.0, atol=1e-5)
