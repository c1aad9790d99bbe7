import functools

import faiss
import numpy as np
import pytest

from tf_msemb.evaluation import search
from conftest import needs_bfloat16


def _unit_rows(n, dim, seed):
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _numpy_knn(queries, pool, k):
    sims = queries @ pool.T
    ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, ids, axis=1), ids


def _fresh_traces(monkeypatch, group):
    """`TOP_K_GROUP = group`, with the block functions traced anew (the group is read when they are traced)."""
    monkeypatch.setattr(search, "TOP_K_GROUP", group)
    for name in ("_score_block_function", "_one_way_block_function"):
        monkeypatch.setattr(search, name, functools.cache(getattr(search, name).__wrapped__))


@pytest.mark.parametrize("engine, group, chunk_size, pool_block",
                         [("tensorflow", 16, 10, 4992), ("tensorflow", 2, 40, 20), ("faiss", 16, 10, 4992)])
def test_chunked_exact_knn_equals_one_numpy_search(engine, group, chunk_size, pool_block, monkeypatch):
    monkeypatch.setattr(search, "QUERY_BLOCK", 4)
    monkeypatch.setattr(search, "POOL_BLOCK", pool_block)
    _fresh_traces(monkeypatch, group)
    queries, pool = _unit_rows(37, 8, 0), _unit_rows(101, 8, 1)
    expected_sims, expected_ids = _numpy_knn(queries, pool, 5)
    # Chunks of 10 split the pool into 11 pieces, the last of one row (fewer than k). Chunks of 40 split into
    # blocks of 20, the last chunk (21 rows) into 20 and 1: _top_k ranks a 20-row block's 10 groups of 2, takes
    # a 1-row block plainly, and each block's top 5 merges into the running top 5 of its 4 queries.
    sims, ids = search.exact_knn(queries, pool, 5, chunk_size=chunk_size, engine=engine)
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


@pytest.mark.parametrize("k", [1, 3, 8])
def test_top_k_by_group_maxima_equals_top_k_ties_included(monkeypatch, k):
    """Scores of 4 values tie often; the grouped path must give tf.math.top_k's values and (earlier-first) indices."""
    import tensorflow as tf

    monkeypatch.setattr(search, "TOP_K_GROUP", 4)
    scores = np.random.default_rng(16).integers(0, 4, (50, 32)).astype(np.float32)
    # Row 0: the best group (28-31) comes late and also holds a tie for second place with index 5; taking
    # candidates in the groups' rank order instead of index order would return 30 before 5.
    scores[0] = 0.0
    scores[0, [29, 30, 5]] = [9.0, 7.0, 7.0]
    for columns in (32, 30):  # 30 is not a multiple of 4: top_k over the whole row
        values, indices = search._top_k(tf.constant(scores[:, :columns]), tf.constant(k))
        expected = tf.math.top_k(scores[:, :columns], k)
        np.testing.assert_array_equal(values, expected.values)
        np.testing.assert_array_equal(indices, expected.indices)
    assert list(search._top_k(tf.constant(scores), tf.constant(2))[1].numpy()[0]) == [29, 5]


@pytest.mark.parametrize("group, chunk_size", [(16, 10), (2, 20)])
def test_two_way_exact_knn_equals_one_numpy_search_each_way(monkeypatch, group, chunk_size):
    monkeypatch.setattr(search, "QUERY_BLOCK", 4)
    # Groups of 2 send the rows' top 5 in 20-row chunks of y through _top_k's 10 group maxima.
    _fresh_traces(monkeypatch, group)
    x, y = _unit_rows(37, 8, 11), _unit_rows(101, 8, 12)
    # The chunks split both pools, y's last chunk of one row (fewer than k); blocks of 4 split x's chunks.
    (xy_sims, xy_ids), (yx_sims, yx_ids) = search.exact_knn_both(x, y, 5, chunk_size=chunk_size)
    for (sims, ids), (expected_sims, expected_ids) in (((xy_sims, xy_ids), _numpy_knn(x, y, 5)),
                                                       ((yx_sims, yx_ids), _numpy_knn(y, x, 5))):
        assert sims.dtype == np.float32 and ids.dtype == np.int64
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_allclose(sims, expected_sims, atol=1e-6)


def test_two_way_exact_knn_reads_float16_memmaps_and_clips_k(tmp_path):
    x, y = _unit_rows(30, 8, 13), _unit_rows(3, 8, 14)
    for name, pool in (("x", x), ("y", y)):
        np.save(tmp_path / f"{name}.npy", pool.astype(np.float16))
    stored = [np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in ("x", "y")]
    for matmul_dtype in search.MATMUL_DTYPES:
        (xy_sims, xy_ids), (yx_sims, yx_ids) = search.exact_knn_both(*stored, 5, chunk_size=7,
                                                                     matmul_dtype=matmul_dtype)
        assert xy_ids.shape == (30, 3) and yx_ids.shape == (3, 5)
        np.testing.assert_array_equal(xy_ids, _numpy_knn(x, y, 3)[1])
        np.testing.assert_array_equal(yx_ids, _numpy_knn(y, x, 5)[1])


def _near_ties(groups=4, size=8, seed=15):
    """Pools whose cosines within a group differ by about 1e-4 (bfloat16 ties them); 0 across groups.

    x_i = a_i e_g + sqrt(1 - a_i^2) u_i and y_j = b_j e_g + sqrt(1 - b_j^2) w_j with u, w private
    basis vectors, so cos(x_i, y_j) = a_i b_j in a group; a and b are shuffled so that index order,
    bfloat16's tie-break, is not the true order.
    """
    rng = np.random.default_rng(seed)
    n = groups * size
    dim = groups + 2 * n
    scale = [0.95 + 1e-4 * rng.permutation(size) for _ in range(2 * groups)]
    pools = []
    for side in range(2):
        v = np.zeros((n, dim), np.float32)
        for row in range(n):
            g, a = row // size, scale[side * groups + row // size][row % size]
            v[row, g], v[row, groups + side * n + row] = a, np.sqrt(1 - a * a)
        pools.append(v)
    return pools


@needs_bfloat16
def test_bfloat16_scores_with_a_float32_rescore_find_the_float32_neighbours(monkeypatch):
    monkeypatch.setattr(search, "QUERY_BLOCK", 4)
    x, y = _near_ties()
    float32 = search.exact_knn_both(x, y, 3, chunk_size=10)
    # Without a margin the bfloat16 top 3 are misordered; the group's 5 others as margin cover the true 3.
    bfloat16_alone = search.exact_knn_both(x, y, 3, chunk_size=10, matmul_dtype="bfloat16", candidate_margin=0)
    rescored = search.exact_knn_both(x, y, 3, chunk_size=10, matmul_dtype="bfloat16", candidate_margin=5)
    for way, (queries, pool) in enumerate(((x, y), (y, x))):
        expected_sims, expected_ids = _numpy_knn(queries, pool, 3)
        np.testing.assert_array_equal(float32[way][1], expected_ids)
        assert np.mean(bfloat16_alone[way][1] != expected_ids) > 0.3
        sims, ids = rescored[way]
        np.testing.assert_array_equal(ids, expected_ids)
        # The float32 cosines, not bfloat16's (which are 1e-3 off).
        np.testing.assert_allclose(sims, (queries.astype(np.float64) @ pool.T.astype(np.float64))[
            np.arange(len(queries))[:, None], ids], atol=1e-6)


def test_knn_both_runs_other_indexes_one_way_at_a_time():
    x, y = _unit_rows(20, 8, 16), _unit_rows(60, 8, 17)
    (_, xy_ids), (_, yx_ids) = search.knn_both(x, y, 3, "flat", nprobe=4)
    np.testing.assert_array_equal(xy_ids, _numpy_knn(x, y, 3)[1])
    np.testing.assert_array_equal(yx_ids, _numpy_knn(y, x, 3)[1])
    with pytest.raises(ValueError, match="matmul_dtype='bfloat16' needs index 'exact', not 'flat'"):
        search.knn_both(x, y, 3, "flat", matmul_dtype="bfloat16")
    with pytest.raises(ValueError, match="Unknown matmul dtype 'float16'"):
        search.exact_knn_both(x, y, 3, matmul_dtype="float16")


def test_shards_searched_with_probed_cells_find_what_one_index_finds():
    """Cells probed once per query, reused on each pool shard's copy of the trained index, then merged by top-k."""
    pool, queries = _unit_rows(3000, 16, 9), _unit_rows(300, 16, 10)
    trained = search.trained_ivf(pool[:1200], len(pool), nlist=30)
    whole = faiss.clone_index(trained)
    whole.add(pool)
    expected = search.search_index(whole, queries, 5, nprobe=3)
    cells = search.probed_cells(trained, queries, nprobe=3)
    sims, ids = np.full((300, 0), np.nan, np.float32), np.zeros((300, 0), np.int64)
    for rows in np.array_split(np.arange(len(pool)), 4):
        shard = faiss.clone_index(trained)
        shard.add(pool[rows])
        shard_sims, shard_ids = search.search_probed(shard, queries, 5, cells)
        sims, ids = search.merge_top_k(sims, ids, shard_sims, np.where(shard_ids < 0, -1, rows[shard_ids]), 5)
    np.testing.assert_array_equal(ids, expected[1])
    np.testing.assert_allclose(sims, expected[0], atol=1e-6)
    # Cells probed by another quantizer (the other pool's, say) are not these: the neighbours differ.
    other = search.trained_ivf(_unit_rows(1200, 16, 11), len(pool), nlist=30)
    shard = faiss.clone_index(trained)
    shard.add(pool)
    assert not np.array_equal(search.search_probed(shard, queries, 5, search.probed_cells(other, queries, 3))[1],
                              expected[1])
