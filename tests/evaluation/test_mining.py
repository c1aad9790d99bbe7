import numpy as np
import pytest

from tf_msemb.evaluation.mining import best_threshold
from tf_msemb.evaluation.mining import candidates_from_knn
from tf_msemb.evaluation.mining import margin_candidates
from tf_msemb.evaluation.mining import mine
from tf_msemb.evaluation.mining import precision_recall_f1
from tf_msemb.evaluation.mining import select


def _unit(v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_margins_by_hand():
    # x0 = y0 exactly; x1 sits between y0 and y1.
    x = _unit([[1.0, 0.0], [1.0, 1.0]])
    y = _unit([[1.0, 0.0], [0.0, 1.0]])
    c = np.sqrt(0.5)
    # k = 2: mean_x = [(1 + 0)/2, (c + c)/2] = [0.5, c]; mean_y = [(1 + c)/2, (c + 0)/2].
    mean_x, mean_y = np.array([0.5, c]), np.array([(1 + c) / 2, c / 2])
    forward, backward = margin_candidates(x, y, k=2, margin="ratio")
    # x0 -> y0: cos 1, denominator (mean_x0 + mean_y0)/2; x0 -> y1: cos 0 -> ratio 0.
    assert forward[0][1:] == (0, 0)
    assert forward[0][0] == pytest.approx(1.0 / ((mean_x[0] + mean_y[0]) / 2), rel=1e-5)
    # x1 -> y1 wins: both cosines are c, but y1's neighbourhood is sparser (smaller mean).
    assert forward[1][1:] == (1, 1)
    assert forward[1][0] == pytest.approx(c / ((mean_x[1] + mean_y[1]) / 2), rel=1e-5)
    distance, _ = margin_candidates(x, y, k=2, margin="distance")
    assert distance[1][0] == pytest.approx(c - (mean_x[1] + mean_y[1]) / 2, rel=1e-5)
    absolute, _ = margin_candidates(x, y, k=2, margin="absolute")
    assert absolute[0][0] == pytest.approx(1.0, rel=1e-6)
    assert backward[1][1:] == (1, 1)
    with pytest.raises(ValueError, match="Unknown margin"):
        margin_candidates(x, y, margin="cosine")


def test_gold_pairs_are_recovered_from_noisy_pools():
    rng = np.random.default_rng(0)
    n, extra, dim = 50, 30, 32
    x = _unit(rng.normal(size=(n + extra, dim)))
    permutation = rng.permutation(n)
    y = np.concatenate([x[:n][permutation] + 0.1 * rng.normal(size=(n, dim)), rng.normal(size=(extra, dim))])
    y = _unit(y)
    gold = {(int(permutation[j]), j) for j in range(n)}
    forward, backward = margin_candidates(x, y, k=4)
    for selection in ("intersect", "max"):
        chosen = select(forward, backward, selection)
        threshold, metrics = best_threshold(chosen, gold)
        assert metrics["f1"] == pytest.approx(1.0), selection
        kept = [(i, j) for s, i, j in chosen if s >= threshold]
        assert precision_recall_f1(kept, gold)["f1"] == pytest.approx(1.0)
    assert len(select(forward, backward, "forward")) == n + extra


def test_exact_mining_scores_both_ways_in_one_pass_with_the_two_one_way_answers(monkeypatch):
    from tf_msemb.evaluation import search

    rng = np.random.default_rng(2)
    x, y = _unit(rng.standard_normal((40, 8))), _unit(rng.standard_normal((70, 8)))
    expected = candidates_from_knn(search.knn(x, y, 4), search.knn(y, x, 4), "ratio")
    calls = []
    both = search.exact_knn_both
    monkeypatch.setattr(search, "exact_knn", lambda *args, **kwargs: pytest.fail("one-way search"))
    monkeypatch.setattr(search, "exact_knn_both", lambda *args, **kwargs: calls.append(kwargs) or both(*args, **kwargs))
    for options in ({}, {"matmul_dtype": "bfloat16"}):
        forward, backward = margin_candidates(x, y, k=4, chunk_size=16, **options)
        for got, want in ((forward, expected[0]), (backward, expected[1])):
            assert [(i, j) for _, i, j in got] == [(i, j) for _, i, j in want]
            np.testing.assert_allclose([s for s, _, _ in got], [s for s, _, _ in want], rtol=1e-5)
    assert [c.get("matmul_dtype", "float32") for c in calls] == ["float32", "bfloat16"]


def test_selection_rules():
    forward = [(0.9, 0, 0), (0.5, 1, 0), (0.4, 2, 2)]
    backward = [(0.9, 0, 0), (0.3, 2, 1), (0.4, 2, 2)]
    assert select(forward, backward, "intersect") == [(0.9, 0, 0), (0.4, 2, 2)]
    # max: best first, each sentence at most once: (0,0), then (1,0) clashes on j=0, (2,2) kept.
    assert select(forward, backward, "max") == [(0.9, 0, 0), (0.4, 2, 2)]
    assert select(forward, backward, "backward")[0] == (0.9, 0, 0)
    with pytest.raises(ValueError, match="Unknown selection"):
        select(forward, backward, "union")


def test_threshold_search_by_hand():
    candidates = [(0.9, 0, 0), (0.8, 1, 1), (0.7, 2, 5), (0.6, 3, 3), (0.2, 4, 9)]
    gold = {(0, 0), (1, 1), (3, 3), (7, 7)}
    threshold, metrics = best_threshold(candidates, gold)
    # keep >= 0.6: 3 hits of 4 predicted, 4 gold -> P = R = F1 = 0.75 (>= 0.8 gives P 1, R 0.5, F1 0.667).
    assert threshold == 0.6
    assert metrics == pytest.approx({"precision": 0.75, "recall": 0.75, "f1": 0.75})
    assert precision_recall_f1([(0, 0), (2, 5)], gold) == pytest.approx({"precision": 0.5, "recall": 0.25, "f1": 1 / 3})


def test_seed004_rescorers_by_hand():
    from tf_msemb.evaluation.mining import margin_scores

    sims = np.array([[0.8, 0.6]])
    mean_query, mean_candidates = np.array([0.7]), np.array([[0.5, 0.9]])
    two_sided = np.array([[0.6, 0.8]])
    np.testing.assert_allclose(margin_scores(sims, mean_query, mean_candidates, "rescore"), sims / two_sided + sims)
    np.testing.assert_allclose(margin_scores(sims, mean_query, mean_candidates, "rescore_one_sided"),
                               [[0.8 / 0.7 + 0.8, 0.6 / 0.7 + 0.6]])
    np.testing.assert_allclose(margin_scores(sims, mean_query, mean_candidates, "distance"), [[0.2, -0.2]], atol=1e-12)


def test_unfilled_neighbours_are_ignored():
    # x0's second neighbour was not found (id -1, NaN): its mean uses the one it has.
    forward_knn = (np.array([[0.9, np.nan]], np.float32), np.array([[0, -1]]))
    backward_knn = (np.array([[0.9, 0.5]], np.float32), np.array([[0, 0]]))
    forward, backward = candidates_from_knn(forward_knn, backward_knn, "ratio")
    assert forward == [(pytest.approx(0.9 / ((0.9 + 0.7) / 2)), 0, 0)]
    assert backward[0][1:] == (0, 0)


def test_a_query_with_no_neighbour_found_has_no_candidate():
    # x1's neighbours were all left unfilled: an argmax over -inf would pair it with id -1 (the pool's last row).
    forward_knn = (np.array([[0.9, 0.5], [np.nan, np.nan]], np.float32), np.array([[0, 1], [-1, -1]]))
    backward_knn = (np.array([[0.9, 0.4], [0.3, 0.5]], np.float32), np.array([[0, 1], [0, 1]]))
    forward, backward = candidates_from_knn(forward_knn, backward_knn, "ratio")
    assert [(i, j) for _, i, j in forward] == [(0, 0)]
    # Backward, x1 (no mean) is never chosen: y0 and y1 both pick x0, though y1 is nearer x1 by cosine.
    assert [(i, j) for _, i, j in backward] == [(0, 0), (0, 1)]


def test_approximate_index_mines_the_same_pairs():
    rng = np.random.default_rng(1)
    y = _unit(rng.standard_normal((500, 16)))
    x = _unit(y[:300] + 0.1 * rng.standard_normal((300, 16)))
    exact = select(*margin_candidates(x, y, k=4), "intersect")
    approximate = select(*margin_candidates(x, y, k=4, index="ivf", nprobe=4), "intersect")
    exact_pairs = {(i, j) for _, i, j in exact}
    approximate_pairs = {(i, j) for _, i, j in approximate}
    assert len(exact_pairs & approximate_pairs) >= 0.95 * len(exact_pairs)
    assert {(i, i) for i in range(300)} >= exact_pairs and len(exact_pairs) > 280


def test_seed004_rescores_the_cosine_nearest_where_artetxe_schwenk_take_the_best_margin_of_k():
    # x0's cosine nearest is y0 (0.9), but y0 is near everything: y1 (0.85, sparse neighbourhood) rescores higher.
    forward_knn = (np.array([[0.9, 0.85], [0.88, 0.1]], np.float32), np.array([[0, 1], [0, 1]]))
    backward_knn = (np.array([[0.9, 0.88], [0.85, 0.1]], np.float32), np.array([[0, 1], [0, 1]]))
    mean_x, mean_y = np.array([0.875, 0.49]), np.array([0.89, 0.475])
    rescored = lambda cos, i, j: cos / ((mean_x[i] + mean_y[j]) / 2) + cos  # noqa: E731 -- Eq. 9
    nearest, _ = candidates_from_knn(forward_knn, backward_knn, "rescore")
    assert nearest[0] == (pytest.approx(rescored(0.9, 0, 0), rel=1e-5), 0, 0)
    best_of_k, _ = candidates_from_knn(forward_knn, backward_knn, "rescore", pick="best_of_k")
    assert best_of_k[0] == (pytest.approx(rescored(0.85, 0, 1), rel=1e-5), 0, 1)
    assert rescored(0.85, 0, 1) > rescored(0.9, 0, 0)
    # Each margin's own paper is the default: A&S's ratio takes the best of k.
    ratio, _ = candidates_from_knn(forward_knn, backward_knn, "ratio")
    assert ratio[0][1:] == (0, 1)
    assert candidates_from_knn(forward_knn, backward_knn, "ratio", pick="nearest")[0][0][1:] == (0, 0)
    with pytest.raises(ValueError, match="Unknown pick 'second'"):
        candidates_from_knn(forward_knn, backward_knn, "ratio", pick="second")


def test_hub_fools_raw_cosine_and_the_eq9_margin_mines_the_true_pairs():
    # Every x_i = a * h + e_i; y_i = e_i; the hub h (in the target pool, nobody's translation) is every x's
    # cosine nearest neighbour (1.2 / 1.56 = 0.77 against 1 / 1.56 = 0.64 for the translation).
    n = 6
    h, e = np.eye(n + 1)[0], np.eye(n + 1)[1:]
    x = _unit(1.2 * h + e)
    y = _unit(np.concatenate([e, h[None]]))
    gold = {(i, i) for i in range(n)}
    forward, _ = margin_candidates(x, y, k=2, margin="absolute")
    assert {j for _, _, j in forward} == {n}  # raw cosine: every source picks the hub
    for margin, expected_f1 in (("absolute", 5 / 6), ("rescore", 1.0)):
        mined = mine(x, y, k=2, margin=margin, selection="max")
        _, metrics = best_threshold(mined, gold)
        assert metrics["f1"] == pytest.approx(expected_f1), margin
    assert {(i, j) for _, i, j in mine(x, y, k=2, margin="rescore", selection="max")} == gold
