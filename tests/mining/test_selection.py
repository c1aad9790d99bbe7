import numpy as np
import pytest

from tf_msemb.evaluation import mining
from tf_msemb.mining import selection


def _candidates(seed, n_x=60, n_y=40, levels=5):
    """Both directions' candidates with many equal scores and hub targets (several sources name one target)."""
    rng = np.random.default_rng(seed)
    forward = (rng.integers(0, levels, n_x) / 4.0, np.arange(n_x), rng.integers(0, n_y // 3, n_x))
    backward = (rng.integers(0, levels, n_y) / 4.0, rng.integers(0, n_x, n_y), np.arange(n_y))
    return forward, backward


def _rows(arrays):
    return list(zip(*(part.tolist() for part in arrays)))


@pytest.mark.parametrize("seed", range(5))
def test_greedy_and_rounds_select_what_mining_select_does(seed):
    forward, backward = _candidates(seed)
    expected = mining.select(_rows(forward), _rows(backward), selection="max")
    assert _rows(selection.select_max(forward, backward)) == expected
    chosen, rounds = selection.select_max_in_rounds(forward, backward)
    assert _rows(chosen) == expected
    assert rounds > 1  # hubs make later rounds necessary: one round of first-at-both edges is not enough


def test_intersect_keeps_pairs_both_directions_found():
    forward = (np.array([0.9, 0.8, 0.7]), np.array([0, 1, 2]), np.array([5, 6, 7]))
    backward = (np.array([0.1, 0.2]), np.array([1, 0]), np.array([6, 9]))
    assert _rows(selection.intersect(forward, backward)) == [(0.8, 1, 6)]
