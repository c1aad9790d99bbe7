import numpy as np
import pytest

from tf_msemb.losses.momentum_contrast import queue_info_nce
from tf_msemb.losses.momentum_contrast import symmetric_queue_loss


def _unit(rng, n, d):
    x = rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _eq2(q, k, queue, t):
    """Seed 002 Eq. 2 per query, with float64 NumPy: positive first, then the queue."""
    q, k, queue = (a.astype(np.float64) for a in (q, k, queue))
    logits = np.concatenate([np.sum(q * k, axis=1, keepdims=True), q @ queue.T], axis=1) / t
    return np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[:, 0])


def test_by_hand_one_query_one_negative():
    # cos(q, k) = 1, cos(q, n) = 0: loss = log(1 + e^(-1/T)).
    q = np.array([[1.0, 0.0]], np.float32)
    n = np.array([[0.0, 1.0]], np.float32)
    assert float(queue_info_nce(q, q, np.array([0]), n, temperature=0.5)) == pytest.approx(np.log1p(np.exp(-2.0)))


def test_matches_numpy_and_ignores_unfilled_slots():
    rng = np.random.default_rng(0)
    q, k, queue = _unit(rng, 4, 8), _unit(rng, 4, 8), _unit(rng, 10, 8)
    labels = np.arange(4)
    got = float(queue_info_nce(q, k, labels, queue, temperature=0.04))
    assert got == pytest.approx(_eq2(q, k, queue, 0.04), rel=1e-5)
    valid = np.array([True] * 6 + [False] * 4)
    got = float(queue_info_nce(q, k, labels, queue, temperature=0.07, queue_valid=valid))
    assert got == pytest.approx(_eq2(q, k, queue[:6], 0.07), rel=1e-5)


def test_keys_of_other_replicas_are_not_negatives_unless_asked():
    rng = np.random.default_rng(1)
    q, keys, queue = _unit(rng, 2, 8), _unit(rng, 6, 8), _unit(rng, 5, 8)
    labels = np.array([3, 4])  # this replica's rows in the gathered keys
    got = float(queue_info_nce(q, keys, labels, queue, temperature=0.1))
    assert got == pytest.approx(_eq2(q, keys[labels], queue, 0.1), rel=1e-5)
    in_batch = float(queue_info_nce(q, keys, labels, queue, temperature=0.1, in_batch_negatives=True))
    all_negatives = np.concatenate([keys, queue])
    logits = q.astype(np.float64) @ all_negatives.T / 0.1
    expected = np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[[0, 1], labels])
    assert in_batch == pytest.approx(expected, rel=1e-5)


def test_symmetric_is_the_sum_of_both_directions():
    rng = np.random.default_rng(2)
    hx, hy, kx, ky, qx, qy = (_unit(rng, n, 8) for n in (3, 3, 3, 3, 7, 7))
    labels = np.arange(3)
    got = float(symmetric_queue_loss(hx, hy, kx, ky, labels, qx, qy, temperature=0.04))
    assert got == pytest.approx(_eq2(hx, ky, qy, 0.04) + _eq2(hy, kx, qx, 0.04), rel=1e-5)
