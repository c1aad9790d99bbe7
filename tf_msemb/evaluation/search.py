"""Nearest-neighbour search over unit vectors with faiss, exact or approximate.

Every index scores by inner product (cosine for unit vectors). Exact search
comes in two engines with the same answers: `exact` multiplies blocks with
TensorFlow and keeps the top k (`_top_k`); `flat` uses faiss's
`IndexFlatIP`, 2.4-3.8x slower on a 2-core AVX-512 machine (its bundled
BLAS reaches about 47 GFLOP/s where TensorFlow's reaches 130). The pool may
be any array-like with `shape` and slicing, such as a float16 `np.memmap`:
it is read and converted to float32 one chunk at a time, so memory stays
bounded by the chunk size plus the index itself (nothing for `exact`, the
float32 pool for `ivf` and `hnsw`, `pq_bytes` per vector for `ivfpq`).

Mining needs k-NN both ways (`knn_both`); `exact_knn_both` scores each pair
once for both directions, and optionally in bfloat16 with a float32
re-score of the best candidates (`matmul_dtype`).
"""

import functools
import math

import faiss
import keras
import numpy as np
import tensorflow as tf

INDEXES = ("exact", "flat", "ivf", "ivfpq", "hnsw")
QUERY_BLOCK = 1024  # queries scored at once by the TensorFlow engine
# Pool rows per score block: a [1024, 4992] float32 block (20 MB) stays in malloc's heap (blocks of
# 100,000, 400 MB, were mapped and faulted in afresh each time: a quarter of the run in the kernel); 4992 is a
# multiple of TOP_K_GROUP and not a power of two, whose row stride made the transpose 25 % slower.
POOL_BLOCK = 4992
MATMUL_DTYPES = ("float32", "bfloat16")
TOP_K_GROUP = 16  # scores per group whose maximum `_top_k` ranks first


def checked_index(index):
    """`index` if it names one of `INDEXES`; a ValueError otherwise."""
    if index not in INDEXES:
        raise ValueError(f"Unknown index {index!r}; choose from {INDEXES}.")
    return index


def checked_matmul_dtype(matmul_dtype, index="exact"):
    """`matmul_dtype` if it names one of `MATMUL_DTYPES` and `index` can use it; a ValueError otherwise.

    Only `exact` search multiplies in another dtype than float32.
    """
    if matmul_dtype not in MATMUL_DTYPES:
        raise ValueError(f"Unknown matmul dtype {matmul_dtype!r}; choose from {MATMUL_DTYPES}.")
    if matmul_dtype != "float32" and index != "exact":
        raise ValueError(f"matmul_dtype={matmul_dtype!r} needs index 'exact', not {index!r}.")
    return matmul_dtype


def _float32(chunk):
    return np.ascontiguousarray(chunk, dtype=np.float32)


def _chunks(n, chunk_size):
    return [(start, min(start + chunk_size, n)) for start in range(0, n, chunk_size)]


def merge_top_k(sims, ids, new_sims, new_ids, k):
    """Keeps the k best of two `[n, *]` result sets, best first."""
    sims = np.concatenate([sims, new_sims], axis=1)
    ids = np.concatenate([ids, new_ids], axis=1)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, order, axis=1), np.take_along_axis(ids, order, axis=1)


def _tensorflow_search(pool_chunk):
    """A search function over one pool chunk: `queries, k -> (sims, ids)`.

    Scores `[QUERY_BLOCK, POOL_BLOCK]` blocks (`_score_block_one_way`) and
    keeps each query block's running top k in TensorFlow.
    """
    blocks = [(tf.constant(start, tf.int64), tf.constant(pool_chunk[start:end]))
              for start, end in _chunks(len(pool_chunk), POOL_BLOCK)]
    score_block = _one_way_block_function()

    def search(queries, k):
        sims, ids = [], []
        for start in range(0, len(queries), QUERY_BLOCK):
            block = tf.constant(queries[start : start + QUERY_BLOCK])
            top_sims, top_ids = tf.zeros((len(block), 0)), tf.zeros((len(block), 0), tf.int64)
            for offset, pool_block in blocks:
                top_sims, top_ids = score_block(block, pool_block, tf.constant(k), top_sims, top_ids, offset)
            sims.append(top_sims.numpy())
            ids.append(top_ids.numpy())
        return np.concatenate(sims), np.concatenate(ids)

    return search


def _faiss_search(pool_chunk):
    index = faiss.IndexFlatIP(pool_chunk.shape[1])
    index.add(pool_chunk)
    return index.search


def exact_knn(queries, pool, k, chunk_size=100_000, verbose=False, engine="tensorflow"):
    """Exact k-NN of every query in `pool`, reading both in chunks.

    Returns `(similarities [n, k], indices [n, k])`, best first. Each pool chunk
    is searched by all queries and the running top-k merged, so the same
    answer as one flat index comes out with `chunk_size` rows of pool in memory.
    `engine` is `tensorflow` or `faiss`.
    """
    engines = {"tensorflow": _tensorflow_search, "faiss": _faiss_search}
    if engine not in engines:
        raise ValueError(f"Unknown exact search engine {engine!r}; choose from {sorted(engines)}.")
    k = min(k, len(pool))
    sims = np.full((len(queries), 0), -np.inf, np.float32)
    ids = np.zeros((len(queries), 0), np.int64)
    pool_chunks = _chunks(len(pool), chunk_size)
    progress = keras.utils.Progbar(len(pool_chunks) * len(queries), unit_name="query", verbose=1 if verbose else 0)
    for start, end in pool_chunks:
        chunk_search = engines[engine](_float32(pool[start:end]))
        chunk_sims, chunk_ids = [], []
        for q_start, q_end in _chunks(len(queries), chunk_size):
            s, i = chunk_search(_float32(queries[q_start:q_end]), min(k, end - start))
            chunk_sims.append(s)
            chunk_ids.append(i + start)
            progress.add(q_end - q_start)
        sims, ids = merge_top_k(sims, ids, np.concatenate(chunk_sims), np.concatenate(chunk_ids), k)
    return sims, ids


def _top_k(scores, k):
    """`(values, indices)` of the top `k` of each row of `[m, n]` `scores`, best first, earlier index on ties.

    When a row splits into at least `k` groups of `TOP_K_GROUP`,
    `tf.math.top_k` (otherwise as slow as the matmul that made the scores)
    runs on the groups' maxima instead: the k best scores lie in the k groups
    with the best maxima (a group outside them is beaten by k groups' maxima,
    so by k scores), so the top k of those groups' `k * TOP_K_GROUP` scores
    are exact. Ties: groups are ranked by (maximum, group index) and their
    scores kept in index order, so the earlier index wins, as in
    `tf.math.top_k`.
    """
    group = TOP_K_GROUP
    rows, size = tf.shape(scores)[0], tf.shape(scores)[1]
    groups = size // group

    def grouped():
        maxima = tf.reduce_max(tf.reshape(scores, [rows, groups, group]), axis=2)
        best_groups = tf.sort(tf.math.top_k(maxima, k).indices, axis=1)
        positions = tf.reshape(best_groups[:, :, None] * group + tf.range(group), [rows, -1])
        top = tf.math.top_k(tf.gather(scores, positions, batch_dims=1), k)
        return top.values, tf.gather(positions, top.indices, batch_dims=1)

    def plain():
        top = tf.math.top_k(scores, k)
        return top.values, top.indices

    if scores.shape[1] is not None and scores.shape[1] % group:
        return plain()
    return tf.cond(tf.logical_and(size % group == 0, groups >= k), grouped, plain)


def _matrix(dtype):
    return tf.TensorSpec([None, None], dtype)


def _scalar(dtype):
    return tf.TensorSpec([], dtype)


def _merge_running_top_k(sims, ids, new_sims, new_ids, k):
    """The `k` best of a running `[n, *]` top-k (`sims`, `ids`) and a new one, best first; running entries win ties."""
    sims = tf.concat([sims, new_sims], axis=1)
    ids = tf.concat([ids, new_ids], axis=1)
    top = tf.math.top_k(sims, tf.minimum(k, tf.shape(sims)[1]))
    return top.values, tf.gather(ids, top.indices, batch_dims=1)


def _score_block_one_way(queries, pool_block, k, sims, ids, offset):
    """The running top `k` of `queries` (`sims`, `ids`) merged with their top k in `pool_block` (ids from `offset`)."""
    scores = tf.matmul(queries, pool_block, transpose_b=True)
    block_sims, block_ids = _top_k(scores, tf.minimum(k, tf.shape(scores)[1]))
    return _merge_running_top_k(sims, ids, block_sims, tf.cast(block_ids, tf.int64) + offset, k)


@functools.cache
def _one_way_block_function():
    """`_score_block_one_way` as a TensorFlow function, traced once for any shapes."""
    return tf.function(_score_block_one_way, input_signature=[
        _matrix(tf.float32), _matrix(tf.float32), _scalar(tf.int32), _matrix(tf.float32), _matrix(tf.int64),
        _scalar(tf.int64)])


def _score_block_both_ways(queries, pool_chunk, row_k, column_sims, column_ids, column_k, offset):
    """One `[queries, pool_chunk]` score block, top-k'd along rows and along columns.

    Returns the rows' top `row_k` (sims as float32, ids in `pool_chunk`) and
    the columns' running top `column_k`: this block's column top-k merged into
    `column_sims`/`column_ids` (ids of queries, shifted by `offset`). Earlier
    entries win ties, as in `exact_knn`.
    """
    scores = tf.matmul(queries, pool_chunk, transpose_b=True)
    row_sims, row_ids = _top_k(scores, tf.minimum(row_k, tf.shape(scores)[1]))
    block_sims, block_ids = _top_k(tf.transpose(scores), tf.minimum(column_k, tf.shape(scores)[0]))
    column_sims, column_ids = _merge_running_top_k(
        column_sims, column_ids, block_sims, tf.cast(block_ids, tf.int64) + offset, column_k)
    return tf.cast(row_sims, tf.float32), row_ids, column_sims, column_ids


@functools.cache
def _score_block_function(dtype):
    """`_score_block_both_ways` as a TensorFlow function for `dtype` blocks, traced once for any shapes."""
    return tf.function(_score_block_both_ways, input_signature=[
        _matrix(dtype), _matrix(dtype), _scalar(tf.int32), _matrix(dtype), _matrix(tf.int64), _scalar(tf.int32),
        _scalar(tf.int64)])


def _rescore(queries, pool, candidates, k):
    """The float32 top k of each query among its `candidates` (`[n, c]` rows of `pool`), best first.

    Candidates are gathered (sorted, unique) from `pool` one query block at a
    time, so only `QUERY_BLOCK * c` vectors are in memory.
    """
    sims, ids = [], []
    for start, end in _chunks(len(queries), QUERY_BLOCK):
        block = candidates[start:end]
        unique, position = np.unique(block, return_inverse=True)
        vectors = tf.gather(tf.constant(_float32(pool[unique])), position.reshape(block.shape))
        scores = tf.linalg.matvec(vectors, tf.constant(_float32(queries[start:end])))
        top = tf.math.top_k(scores, k)
        sims.append(top.values.numpy())
        ids.append(np.take_along_axis(block, top.indices.numpy(), axis=1))
    return np.concatenate(sims), np.concatenate(ids)


def exact_knn_both(x, y, k, chunk_size=100_000, verbose=False, matmul_dtype="float32", candidate_margin=16):
    """Exact k-NN of `x` in `y` and of `y` in `x` from one pass over the score matrix.

    Returns `((sims, ids) of x in y, (sims, ids) of y in x)`, best first, as
    two `exact_knn` calls would (ids equal up to exact ties), at half the
    matmul work: each `[QUERY_BLOCK rows of x, POOL_BLOCK rows of y]` score
    block is computed once; its row top-k (`_top_k`) merges into x's running
    top-k, its column top-k into y's. x is read `chunk_size` rows at a time
    and y a block at a time (float16 memmaps are fine); the block and its
    transpose are in memory at once.

    `matmul_dtype="bfloat16"` multiplies in bfloat16 (faster only where the
    hardware has bfloat16 matmuls: AVX512-BF16 or AMX CPUs, GPUs), keeps
    each row's and column's top `k + candidate_margin` by the bfloat16
    scores, then re-scores those candidates in float32 (`_rescore`, gathering
    them from the other pool): the returned sims are float32 cosines, and
    the ids the float32 ones unless more than `candidate_margin` vectors
    crowd a true neighbour within bfloat16's error (its scores have 8
    significant bits: steps of 0.004 between cosines 0.5 and 1).
    """
    dtype = tf.as_dtype(checked_matmul_dtype(matmul_dtype))
    rescore = matmul_dtype != "float32"
    x_k, y_k = min(k, len(y)), min(k, len(x))
    # Candidates kept per row of x and per row of y: the k, plus the margin re-scored in float32.
    x_keep, y_keep = (min(k + candidate_margin, len(y)), min(k + candidate_margin, len(x))) if rescore else (x_k, y_k)
    row_k, column_k = tf.constant(x_keep), tf.constant(y_keep)
    score_block = _score_block_function(dtype)
    x_sims = np.full((len(x), 0), -np.inf, np.float32)
    x_ids = np.zeros((len(x), 0), np.int64)
    y_sims, y_ids = [], []
    y_chunks, x_chunks = _chunks(len(y), min(chunk_size, POOL_BLOCK)), _chunks(len(x), chunk_size)
    progress = keras.utils.Progbar(len(y_chunks) * len(x), unit_name="query", verbose=1 if verbose else 0)
    for y_start, y_end in y_chunks:
        y_chunk = tf.cast(tf.constant(_float32(y[y_start:y_end])), dtype)
        column_sims = tf.zeros((y_end - y_start, 0), dtype)
        column_ids = tf.zeros((y_end - y_start, 0), tf.int64)
        row_sims, row_ids = [], []
        for x_start, x_end in x_chunks:
            x_chunk = _float32(x[x_start:x_end])
            for start in range(0, len(x_chunk), QUERY_BLOCK):
                block = tf.cast(tf.constant(x_chunk[start : start + QUERY_BLOCK]), dtype)
                s, i, column_sims, column_ids = score_block(
                    block, y_chunk, row_k, column_sims, column_ids, column_k, tf.constant(x_start + start, tf.int64))
                row_sims.append(s.numpy())
                row_ids.append(i.numpy().astype(np.int64) + y_start)
            progress.add(x_end - x_start)
        x_sims, x_ids = merge_top_k(x_sims, x_ids, np.concatenate(row_sims), np.concatenate(row_ids), x_keep)
        column_ids = column_ids.numpy()
        if rescore:
            y_sims_chunk, column_ids = _rescore(y[y_start:y_end], x, column_ids, y_k)
        else:
            y_sims_chunk = column_sims.numpy()
        y_sims.append(y_sims_chunk)
        y_ids.append(column_ids)
    if rescore:
        x_sims, x_ids = _rescore(x, y, x_ids, x_k)
    return (x_sims, x_ids), (np.concatenate(y_sims), np.concatenate(y_ids))


def build_index(pool, kind="ivf", nlist=None, pq_bytes=48, hnsw_neighbors=32, chunk_size=100_000, seed=0,
                verbose=False):
    """An approximate inner-product faiss index over `pool` (added chunk by chunk).

    `ivf`: inverted lists of raw vectors over `nlist` k-means cells (default
    about 4 sqrt(n)); `ivfpq`: the same cells holding product-quantized codes
    of `pq_bytes` bytes per vector (`dim` must be divisible by it; 8 or more
    dims per byte keep faiss on its fast path: 64 bytes for 384 dims trains
    7x slower than 48); `hnsw`: a
    graph with `hnsw_neighbors` links per node. Cells and codebooks are
    trained on a random sample of 40 points per cell (at least 10,000).
    """
    n, dim = pool.shape
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_neighbors, faiss.METRIC_INNER_PRODUCT)
    elif kind in ("ivf", "ivfpq"):
        nlist = ivf_cells(n, n, nlist)
        quantizer = faiss.IndexFlatIP(dim)
        if kind == "ivf":
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            if dim % pq_bytes:
                raise ValueError(f"pq_bytes={pq_bytes} must divide the embedding dim {dim}.")
            bits = max(1, min(8, int(math.log2(max(2, n // 39)))))
            index = faiss.IndexIVFPQ(quantizer, dim, nlist, pq_bytes, bits, faiss.METRIC_INNER_PRODUCT)
        sample = np.sort(np.random.default_rng(seed).choice(n, size=min(n, max(40 * nlist, 10_000)), replace=False))
        index.train(_float32(pool[sample]))
    else:
        raise ValueError(f"Unknown index {kind!r}; choose from {INDEXES}.")
    progress = keras.utils.Progbar(n, unit_name="vector", verbose=1 if verbose else 0)
    for start, end in _chunks(n, chunk_size):
        index.add(_float32(pool[start:end]))
        progress.add(end - start)
    return index


def ivf_cells(pool_size, sample_size, nlist=None):
    """IVF cells: `nlist`, or about 4 sqrt(pool size); at most one per 39 training points (faiss' minimum)."""
    return max(1, min(nlist or int(4 * math.sqrt(pool_size)), sample_size // 39))


def trained_ivf(sample, pool_size, nlist=None):
    """An empty inner-product IVF index (raw vectors in `ivf_cells` cells) whose cells are trained on `sample`.

    Indexes that start from the same trained one share their cells, so
    searching each of several pool shards' copies with `nprobe` and merging
    finds what one index over the whole pool finds.
    """
    sample = _float32(sample)
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(sample.shape[1]), sample.shape[1],
                               ivf_cells(pool_size, len(sample), nlist), faiss.METRIC_INNER_PRODUCT)
    index.train(sample)
    return index


def search_index(index, queries, k, nprobe=16, ef_search=128, chunk_size=100_000, verbose=False):
    """Approximate k-NN of `queries` in a `build_index` index, best first.

    Neighbours the index could not fill (fewer than k vectors in the probed
    cells) come back with similarity NaN and index -1.
    """
    if hasattr(index, "nprobe"):
        index.nprobe = min(nprobe, index.nlist)
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = max(ef_search, k)
    k = min(k, index.ntotal)
    sims, ids = [], []
    progress = keras.utils.Progbar(len(queries), unit_name="query", verbose=1 if verbose else 0)
    for start, end in _chunks(len(queries), chunk_size):
        s, i = index.search(_float32(queries[start:end]), k)
        sims.append(np.where(i < 0, np.nan, s).astype(np.float32))
        ids.append(i)
        progress.add(end - start)
    return np.concatenate(sims), np.concatenate(ids)


def probed_cells(index, queries, nprobe):
    """`(cell similarities, cells)` `[n, nprobe]`: the IVF cells `index`'s quantizer probes for each query.

    Computed once per query, they serve every index that shares the
    quantizer's cells (`search_probed`): the shards of one pool.
    """
    return index.quantizer.search(_float32(queries), min(nprobe, index.nlist))


def search_probed(index, queries, k, cells):
    """`search_index` of an IVF `index` with the queries' `probed_cells` given, so no quantizer search runs.

    faiss' `parallel_mode` 3 spreads the queries over its threads: under
    the default (0) only `search` splits them, and a preassigned search
    ran on one core (2.3x slower on 2 cores).
    """
    cell_sims, cell_ids = cells
    k = min(k, index.ntotal)
    index.nprobe = cell_ids.shape[1]
    index.parallel_mode = 3
    sims, ids = index.search_preassigned(_float32(queries), k, cell_ids, cell_sims)
    return np.where(ids < 0, np.nan, sims).astype(np.float32), ids


def knn_both(x, y, k, index="exact", chunk_size=100_000, verbose=False, matmul_dtype="float32", candidate_margin=16,
             **index_options):
    """k-NN of `x` in `y` and of `y` in `x`: `((sims, ids), (sims, ids))`.

    `exact` scores both ways in one pass (`exact_knn_both`, where
    `matmul_dtype` and `candidate_margin` apply); other indexes run `knn`
    twice and take float32 only.
    """
    if index == "exact":
        return exact_knn_both(x, y, k, chunk_size, verbose, matmul_dtype=matmul_dtype,
                              candidate_margin=candidate_margin)
    checked_matmul_dtype(matmul_dtype, index)
    return (knn(x, y, k, index, chunk_size, verbose, **index_options),
            knn(y, x, k, index, chunk_size, verbose, **index_options))


def knn(queries, pool, k, index="exact", chunk_size=100_000, verbose=False, **index_options):
    """k-NN of `queries` in `pool` with the named `index` (see `INDEXES`); options of other indexes are ignored."""
    if index in ("exact", "flat"):
        return exact_knn(queries, pool, k, chunk_size, verbose, "tensorflow" if index == "exact" else "faiss")
    search_options = {key: index_options.pop(key) for key in ("nprobe", "ef_search") if key in index_options}
    built = build_index(pool, index, chunk_size=chunk_size, verbose=verbose, **index_options)
    return search_index(built, queries, k, chunk_size=chunk_size, verbose=verbose, **search_options)
