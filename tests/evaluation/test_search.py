import numpy as np
import pytest

from tf_msemb.evaluation import search


def _unit_rows(n, dim, seed):
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _numpy_knn(queries, pool, k):
    sims = queries @ pool.T
    ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, ids, axis=1), ids


@pytest.mark.parametrize("engine", ["tensorflow", "faiss"])
def test_chunked_exact_knn_equals_one_numpy_search(engine, monkeypatch):
    monkeypatch.setattr(search, "QUERY_BLOCK", 4)
    queries, pool = _unit_rows(37, 8, 0), _unit_rows(101, 8, 1)
    expected_sims, expected_ids = _numpy_knn(queries, pool, 5)
    # Chunks of 10 split the pool into 11 pieces, the last of one row (fewer than k).
    sims, ids = search.exact_knn(queries, pool, 5, chunk_size=10, engine=engine)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(sims, expected_sims, atol=1e-6)


def test_exact_knn_reads_a_float16_memmap(tmp_path):
    pool = _unit_rows(50, 8, 2)
    path = tmp_path / "pool.npy"
    np.save(path, pool.astype(np.float16))
    stored = np.load(path, mmap_mode="r")
    _, ids = search.exact_knn(pool[:10], stored, 1, chunk_size=16)
    np.testing.assert_array_equal(ids[:, 0], np.arange(10))


def test_k_larger_than_pool_is_clipped():
    sims, ids = search.exact_knn(_unit_rows(3, 4, 3), _unit_rows(2, 4, 4), 5)
    assert sims.shape == ids.shape == (3, 2)


def test_knn_dispatches_flat_to_faiss_with_the_same_answer():
    queries, pool = _unit_rows(20, 8, 9), _unit_rows(60, 8, 10)
    for kind in ("exact", "flat"):
        np.testing.assert_array_equal(search.knn(queries, pool, 3, kind, nprobe=4)[1], _numpy_knn(queries, pool, 3)[1])


@pytest.mark.parametrize("kind", ["ivf", "ivfpq", "hnsw"])
def test_approximate_indexes_find_near_duplicates(kind):
    pool = _unit_rows(4000, 32, 5)
    noisy = pool[:200] + 0.05 * np.random.default_rng(6).standard_normal((200, 32)).astype(np.float32)
    queries = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    sims, ids = search.knn(queries, pool, 3, index=kind, pq_bytes=8, nprobe=8)
    assert sims.shape == ids.shape == (200, 3)
    recall_at_1 = np.mean(ids[:, 0] == np.arange(200))
    assert recall_at_1 > 0.9, recall_at_1
    assert np.all(np.diff(sims, axis=1) <= 1e-6)  # best first


def test_unfilled_neighbours_are_nan():
    pool = _unit_rows(400, 8, 7)
    index = search.build_index(pool, "ivf", nlist=10)
    # One probed cell of ~40 vectors cannot supply 100 neighbours.
    sims, ids = search.search_index(index, pool[:5], 100, nprobe=1)
    assert np.all(np.isnan(sims) == (ids < 0))
    assert np.any(ids < 0)


def test_bad_index_options_name_the_problem():
    with pytest.raises(ValueError, match="Unknown exact search engine 'blas'"):
        search.exact_knn(_unit_rows(10, 8, 8), _unit_rows(10, 8, 8), 1, engine="blas")
    with pytest.raises(ValueError, match="Unknown index"):
        search.build_index(_unit_rows(10, 8, 8), "lsh")
    with pytest.raises(ValueError, match="pq_bytes=5 must divide the embedding dim 8"):
        search.build_index(_unit_rows(100, 8, 8), "ivfpq", pq_bytes=5)
