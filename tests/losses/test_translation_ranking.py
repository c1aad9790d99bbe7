import numpy as np
import pytest

from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.losses.translation_ranking import duplicate_candidates_mask
from tf_msemb.losses.translation_ranking import forward_ranking_loss
from tf_msemb.losses.translation_ranking import in_batch_softmax_loss


def _unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _reference(q, c, labels, scale, margin):
    cos = q.astype(np.float64) @ c.T.astype(np.float64)
    cos[np.arange(len(q)), labels] -= margin
    logits = scale * cos
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(q)), labels].mean()


def test_by_hand_two_by_two():
    # q0 = c0 = -c1, q1 orthogonal to both: loss = mean(-log(e^s / (e^s + e^-s)), log 2).
    q = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    c = np.array([[1.0, 0.0], [-1.0, 0.0]], np.float32)
    expected = (np.log1p(np.exp(-4.0)) + np.log(2.0)) / 2
    assert float(in_batch_softmax_loss(q, c, np.array([0, 1]), scale=2.0)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("scale,margin", [(1.0, 0.0), (20.0, 0.0), (10.0, 0.3)])
def test_matches_numpy(scale, margin):
    rng = np.random.default_rng(0)
    q, c = _unit(rng, 4, 8), _unit(rng, 6, 8)
    labels = np.array([2, 3, 0, 5])
    got = float(in_batch_softmax_loss(q, c, labels, scale, margin))
    assert got == pytest.approx(_reference(q, c, labels, scale, margin), rel=1e-5)


def test_margin_raises_the_loss():
    rng = np.random.default_rng(1)
    q, c = _unit(rng, 5, 8), _unit(rng, 5, 8)
    labels = np.arange(5)
    assert float(in_batch_softmax_loss(q, c, labels, 10.0, 0.3)) > float(in_batch_softmax_loss(q, c, labels, 10.0))


def test_bidirectional_is_the_sum_of_both_directions():
    rng = np.random.default_rng(2)
    x, y = _unit(rng, 3, 4), _unit(rng, 3, 4)
    labels = np.arange(3)
    got = float(bidirectional_ranking_loss(x, y, x, y, labels, scale=5.0))
    expected = _reference(x, y, labels, 5.0, 0.0) + _reference(y, x, labels, 5.0, 0.0)
    assert got == pytest.approx(expected, rel=1e-5)


def test_masked_candidates_leave_the_softmax():
    rng = np.random.default_rng(3)
    q, c = _unit(rng, 3, 8), _unit(rng, 5, 8)
    labels = np.array([0, 1, 2])
    mask = np.array([True, True, True, False, True])
    got = float(in_batch_softmax_loss(q, c, labels, 10.0, 0.2, candidate_mask=mask))
    # Dropping candidate 3 equals scoring against the four others (labels unchanged: 0, 1, 2 < 3).
    assert got == pytest.approx(_reference(q, c[mask], labels, 10.0, 0.2), rel=1e-5)
    per_row = np.ones((3, 5), bool)
    per_row[0, 4] = False
    got = float(in_batch_softmax_loss(q, c, labels, 10.0, candidate_mask=per_row))
    expected = (_reference(q[:1], c[:4], labels[:1], 10.0, 0.0) + 2 * _reference(q[1:], c, labels[1:], 10.0, 0.0)) / 3
    assert got == pytest.approx(expected, rel=1e-5)


def test_hard_negatives_compete_only_in_the_forward_direction():
    rng = np.random.default_rng(4)
    x, y, hard = _unit(rng, 3, 8), _unit(rng, 3, 8), _unit(rng, 6, 8)
    labels = np.arange(3)
    got = float(bidirectional_ranking_loss(x, y, x, y, labels, scale=10.0, margin=0.3, hard_negatives=hard))
    forward = _reference(x, np.concatenate([y, hard]), labels, 10.0, 0.3)
    backward = _reference(y, x, labels, 10.0, 0.3)
    assert got == pytest.approx(forward + backward, rel=1e-5)
    # Extra negatives can only raise the forward loss.
    without = float(bidirectional_ranking_loss(x, y, x, y, labels, scale=10.0, margin=0.3))
    assert got > without


def test_forward_loss_is_the_x_to_y_half_with_the_hard_negatives():
    rng = np.random.default_rng(5)
    x, y, hard = _unit(rng, 3, 4), _unit(rng, 3, 4), _unit(rng, 2, 4)
    labels = np.arange(3)
    got = float(forward_ranking_loss(x, y, labels, scale=5.0, margin=0.3, hard_negatives=hard))
    assert got == pytest.approx(_reference(x, np.concatenate([y, hard]), labels, 5.0, 0.3), rel=1e-5)
    both = float(bidirectional_ranking_loss(x, y, x, y, labels, scale=5.0, margin=0.3, hard_negatives=hard))
    assert both == pytest.approx(got + _reference(y, x, labels, 5.0, 0.3), rel=1e-5)


def test_raw_embeddings_are_scored_by_dot_product():
    # Seed 004 Sec. 3.1: phi = x . y (unnormalized, as footnote 3 implies); the margin comes off the positive's
    # dot product.
    x = np.array([[2.0, 0.0], [0.0, 1.0]], np.float32)
    y = np.array([[3.0, 0.0], [1.0, 1.0]], np.float32)
    dots = x @ y.T  # [[6, 2], [0, 1]]
    expected = np.mean([np.log1p(np.exp(2.0 - (6.0 - 0.5))), np.log1p(np.exp(0.0 - (1.0 - 0.5)))])
    assert dots[0, 0] == 6.0
    assert float(in_batch_softmax_loss(x, y, np.arange(2), scale=1.0, margin=0.5)) == pytest.approx(expected, rel=1e-6)


def _masked_reference(q, c, labels, scale, margin, keep):
    """`_reference` with each query's softmax over its `keep[i]` candidates only."""
    cos = q.astype(np.float64) @ c.T.astype(np.float64)
    cos[np.arange(len(q)), labels] -= margin
    logits = np.where(keep, scale * cos, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(q)), labels].mean()


def test_the_duplicate_mask_keeps_the_positive_and_drops_other_copies():
    # Pairs 0 and 2 share a source; pair 3's key matches nothing local but candidate 4 (another replica's).
    keys, candidate_keys = np.array([7, 8, 7, 9]), np.array([7, 8, 7, 5, 9, 1])
    got = np.asarray(duplicate_candidates_mask(keys, candidate_keys, np.array([0, 1, 2, 3])))
    expected = np.ones((4, 6), bool)
    expected[0, 2] = expected[2, 0] = False
    expected[3, 4] = False
    np.testing.assert_array_equal(got, expected)


def test_a_repeated_source_is_neither_a_negative_nor_a_rival_positive_either_way():
    """Pair 3 repeats pair 0's English sentence with another language: x_3 = x_0, y_3 another translation."""
    rng = np.random.default_rng(5)
    x = _unit(rng, 5, 8)
    x[3] = x[0]
    y = x + 0.4 * _unit(rng, 5, 8)  # translations near their sources; y_3 another one of x_0
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    labels = np.arange(5)
    keep = np.asarray(duplicate_candidates_mask(np.array([1, 2, 3, 1, 4]), np.array([1, 2, 3, 1, 4]), labels))
    got = float(bidirectional_ranking_loss(x, y, x, y, labels, scale=10.0, margin=0.3, candidate_mask=keep))
    expected = (_masked_reference(x, y, labels, 10.0, 0.3, keep) + _masked_reference(y, x, labels, 10.0, 0.3, keep))
    assert got == pytest.approx(expected, rel=1e-5)
    # Today's unmasked loss scores x_3 exactly as pair 0's positive (y -> x) and differs.
    unmasked = float(bidirectional_ranking_loss(x, y, x, y, labels, scale=10.0, margin=0.3))
    assert unmasked - got > 0.3
    # With hard negatives the mask still covers the in-batch part, and the negatives stay in x -> y.
    hard = _unit(rng, 4, 8)
    got = float(bidirectional_ranking_loss(x, y, x, y, labels, 10.0, 0.3, hard_negatives=hard,
                                           hard_negative_mask=np.array([True, False, True, True]),
                                           candidate_mask=keep))
    forward_keep = np.concatenate([keep, np.broadcast_to([True, False, True, True], (5, 4))], axis=1)
    expected = (_masked_reference(x, np.concatenate([y, hard]), labels, 10.0, 0.3, forward_keep)
                + _masked_reference(y, x, labels, 10.0, 0.3, keep))
    assert got == pytest.approx(expected, rel=1e-5)
