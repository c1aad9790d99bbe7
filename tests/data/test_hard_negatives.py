import numpy as np
import pytest

from tf_msemb.data.hard_negatives import NO_NEGATIVES
from tf_msemb.data.hard_negatives import choose_negatives
from tf_msemb.data.hard_negatives import mine_hard_negatives
from tf_msemb.data.hard_negatives import translations_of_sources
from tf_msemb.evaluation.search import exact_knn


def _unit(v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_the_truth_and_its_near_duplicates_are_skipped():
    pool = _unit([[1.0, 0.0, 0.0], [1.0, 0.05, 0.0], [0.6, 0.8, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    # Row 0's truth is target 0, target 1 its near-duplicate (cos 0.999); row 1's truth is target 3.
    ids = np.array([[1, 0, 2, 3, 4], [3, 2, -1, -1, -1]])
    chosen = choose_negatives(ids, np.array([0, 3]), pool, k=2, ceiling=0.95)
    assert chosen[0].tolist() == [2, 3]
    assert chosen[1].tolist() == [NO_NEGATIVES, NO_NEGATIVES]  # one acceptable neighbour (2), unfilled ones never
    assert choose_negatives(ids, np.array([0, 3]), pool, k=2, ceiling=1.01)[0].tolist() == [1, 2]


def test_every_translation_of_the_source_and_its_near_duplicates_are_skipped():
    pool = _unit([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.99, 0.1], [0.6, 0.0, 0.8], [0.0, 0.0, 1.0]])
    # The source has two translations, targets 0 and 1; target 2 is a near-duplicate of the second one.
    ids = np.array([[1, 2, 0, 3, 4]])
    assert choose_negatives(ids, np.array([0]), pool, k=2, ceiling=0.95)[0].tolist() == [1, 2]  # one truth only
    assert choose_negatives(ids, np.array([[0, 1]]), pool, k=2, ceiling=0.95)[0].tolist() == [3, 4]
    assert choose_negatives(ids, np.array([[0, -1]]), pool, k=2, ceiling=0.95)[0].tolist() == [1, 2]  # padding


def test_each_row_lists_every_target_of_its_source_its_own_first():
    rows = [("a", "x"), ("b", "y"), ("a", "z"), ("a", "x")]
    true_ids = translations_of_sources(rows, {"x": 0, "y": 1, "z": 2})
    assert true_ids.tolist() == [[0, 2], [1, -1], [2, 0], [0, 2]]


def test_an_interrupted_run_continues_after_its_last_chunk(tmp_path):
    rng = np.random.default_rng(0)
    pool = _unit(rng.normal(size=(40, 8)))
    queries = _unit(pool[:30] + 0.3 * rng.normal(size=(30, 8)))
    true_ids = np.arange(30)
    calls = []

    def search(chunk):
        calls.append(len(chunk))
        return exact_knn(chunk, pool, 8)

    expected = mine_hard_negatives(queries, pool, true_ids, 3, 0.95, search, str(tmp_path / "whole"), 8, False)
    assert calls == [8, 8, 8, 6]
    assert not (expected == true_ids[:, None]).any() and (expected != NO_NEGATIVES).all()

    def interrupted(chunk):
        if calls:
            raise KeyboardInterrupt
        return search(chunk)

    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        mine_hard_negatives(queries, pool, true_ids, 3, 0.95, interrupted, str(tmp_path / "resumed"), 8, False)
    assert len(list((tmp_path / "resumed").glob("chunk-*.npy"))) == 1
    calls.clear()
    resumed = mine_hard_negatives(queries, pool, true_ids, 3, 0.95, search, str(tmp_path / "resumed"), 8, False)
    assert calls == [8, 8, 6]  # the first chunk came from disk
    np.testing.assert_array_equal(resumed, expected)
