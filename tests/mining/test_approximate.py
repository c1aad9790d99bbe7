import numpy as np
import pytest

from tf_msemb.evaluation import search
from tf_msemb.mining import approximate
from mining.pools import clustered_pools


@pytest.mark.parametrize("size, cells, probes, train_size", [
    (10_000, 128, 32, 5_120), (1_000_000, 1024, 32, 40_960), (3_000_000, 2048, 64, 81_920),
    (10_000_000, 2048, 64, 81_920)])
def test_plan_grows_cells_with_the_square_root_of_the_pool(size, cells, probes, train_size):
    plan = approximate.plan_for(size)
    assert (plan.cells, plan.probes, plan.train_size, plan.codes, plan.candidates) == (
        cells, probes, train_size, "float16", 4)
    assert approximate.plan_for(size, "binary").candidates == 64
    assert plan.train_size >= min(size, 39 * plan.cells)  # faiss' minimum of training points a cell
    assert approximate.plan_for(size, "int8").candidates == 16
    assert approximate.plan_for(size, "peer").candidates == 0  # stopes scores by its codes


def test_factory_strings_name_the_codes():
    plan = approximate.SearchPlan("pq", cells=64, probes=8, candidates=32, train_size=4000, pq_bytes=48)
    assert plan.factory(384) == "RR384,IVF64,PQ48np"
    assert approximate.SearchPlan("peer", 16_384, 64, 0, 10).factory(384) == "OPQ64,IVF16384_HNSW32,PQ64"
    assert approximate.SearchPlan("binary", 64, 8, 32, 10).factory(384) == "IVF64,RaBitQ"
    assert approximate.SearchPlan("int4", 64, 8, 32, 10).factory(384) == "IVF64,SQ4"
    with pytest.raises(ValueError, match="pq_bytes=48 must divide the embedding dim 100"):
        plan.factory(100)
    with pytest.raises(ValueError, match="probes=9 exceeds cells=8"):
        approximate.SearchPlan("int8", 8, 9, 0, 10)


def _exact(queries, pool, k):
    return search.exact_knn(np.asarray(queries, np.float32), np.asarray(pool, np.float32), k)


@pytest.mark.parametrize("codes, code_bytes, agree", [
    ("float16", 128, 0.999), ("int8", 64, 0.99), ("int4", 32, 0.97), ("pq", 16, 0.95), ("binary", None, 0.9)])
def test_rescored_search_finds_the_exact_neighbours_with_exact_cosines(codes, code_bytes, agree):
    x, y, _ = clustered_pools()
    plan = approximate.SearchPlan(codes, cells=16, probes=16, candidates=32, train_size=1300, pq_bytes=16)
    index = approximate.train_index(plan, y)
    approximate.add_vectors(index, y, np.arange(len(y)), chunk_size=500)
    sims, rows = approximate.search(index, plan, x, y, k=4)
    exact_sims, exact_rows = _exact(x, y, 4)
    assert np.mean(rows == exact_rows) > agree  # 64 bits a vector (binary) rank least well
    # The cosines are the float32 ones of the rows returned, not the codes' estimates.
    np.testing.assert_allclose(sims, np.einsum("nd,nkd->nk", x.astype(np.float32), y.astype(np.float32)[rows]),
                               atol=1e-5)
    if code_bytes:
        assert approximate.bytes_per_vector(index) == code_bytes + 8
    if codes in ("pq", "binary"):  # without re-scoring, the codes' scores are far from the cosines
        raw_sims, raw_rows = approximate.search(index, approximate.SearchPlan(codes, 16, 16, 0, 1300, 16), x, y, 4)
        assert np.max(np.abs(raw_sims - exact_sims)) > 0.01


def test_rescore_skips_unfilled_candidates():
    pool = np.eye(4, dtype=np.float16)
    queries = np.array([[0.6, 0.8, 0, 0], [0, 0, 0, 1]], np.float32)
    candidates = np.array([[0, 1, -1], [-1, -1, 3]])
    sims, rows = approximate.best_k(approximate.cosines(queries, pool, candidates), candidates, k=2)
    np.testing.assert_allclose(sims[0], [0.8, 0.6])
    assert rows.tolist() == [[1, 0], [3, -1]]
    assert np.isnan(sims[1, 1])


def test_ids_are_pool_rows_when_added_in_pieces():
    _, y, _ = clustered_pools()
    plan = approximate.SearchPlan("float16", cells=8, probes=8, candidates=8, train_size=1300)
    index = approximate.train_index(plan, y)
    approximate.add_vectors(index, y, np.arange(700, 1300), offset=700)
    approximate.add_vectors(index, y, np.arange(700), chunk_size=300)
    _, rows = approximate.search(index, plan, y[:50], y, k=1)
    assert rows[:, 0].tolist() == list(range(50))


@pytest.mark.parametrize("codes", ["binary", "pq"])  # pq: the cells live after the index's random rotation
def test_many_cells_are_trained_in_two_levels_and_find_the_neighbours(codes, monkeypatch):
    x, y, _ = clustered_pools()
    calls = []
    two_level = approximate.clustering.two_level_clustering
    monkeypatch.setattr(approximate.clustering, "two_level_clustering",
                        lambda *args, **kwargs: calls.append(args[1:3]) or two_level(*args, **kwargs))
    monkeypatch.setattr(approximate, "HNSW_CELLS", 16)
    plan = approximate.SearchPlan(codes, cells=16, probes=4, candidates=32, train_size=1300, pq_bytes=16)
    index = approximate.train_index(plan, y)
    assert calls == [(4, 16)]
    approximate.add_vectors(index, y, np.arange(len(y)))
    _, rows = approximate.search(index, plan, x, y, k=4)
    _, exact_rows = _exact(x, y, 4)
    # A quarter of the cells probed: cells in another space than the queries' would miss most neighbours.
    assert np.mean(rows == exact_rows) > 0.9


def test_float16_cells_are_scored_exactly_by_matrix_products(monkeypatch):
    x, y, _ = clustered_pools()
    monkeypatch.setattr(approximate, "MATMUL_BLOCK", 37)  # several blocks, each grouped by cell
    plan = approximate.SearchPlan("float16", cells=16, probes=3, candidates=0, train_size=1300)
    index = approximate.train_index(plan, y)
    approximate.add_vectors(index, y, np.arange(len(y)), chunk_size=500)
    ivf = approximate.faiss.extract_index_ivf(index)
    vectors, ids = approximate._cell_vectors(ivf, 5)
    np.testing.assert_array_equal(vectors, y[ids].astype(np.float32))  # codes are the vectors, not residuals
    sims, rows = approximate.search(index, plan, x, y, k=4)
    # The truth: exact k-NN among the vectors of each query's 3 probed cells only.
    _, home = ivf.quantizer.search(np.asarray(y, np.float32), 1)
    _, probed = approximate.probed_cells(index, plan, x)
    scores = x.astype(np.float32) @ y.astype(np.float32).T
    scores[~(home[:, 0][None, :] == probed[:, :, None]).any(axis=1)] = -np.inf
    truth = np.argsort(-scores, axis=1, kind="stable")[:, :4]
    assert np.mean(rows == truth) > 0.999
    np.testing.assert_allclose(sims, np.take_along_axis(scores, rows, axis=1), atol=1e-6)
    # Three of 16 cells probed loses neighbours that a search of every cell finds.
    assert np.mean(rows == _exact(x, y, 4)[1]) < 0.99
