"""Nearest-neighbour search over unit vectors with faiss, exact or approximate.

Every index scores by inner product (cosine for unit vectors). Exact search
comes in two engines with the same answers: `exact` multiplies blocks with
TensorFlow and keeps the top k with `tf.math.top_k`; `flat` uses faiss's
`IndexFlatIP`, 2.4-3.8x slower on our 2-core AVX-512 machine (its bundled
BLAS reaches about 47 GFLOP/s where TensorFlow's reaches 130). The pool may
be any array-like with `shape` and slicing, such as a float16 `np.memmap`:
it is read and converted to float32 one chunk at a time, so memory stays
bounded by the chunk size plus the index itself (nothing for `exact`, the
float32 pool for `ivf` and `hnsw`, `pq_bytes` per vector for `ivfpq`).
"""

import math

import faiss
import keras
import numpy as np
import tensorflow as tf

INDEXES = ("exact", "flat", "ivf", "ivfpq", "hnsw")
QUERY_BLOCK = 1024  # queries scored at once by the TensorFlow engine: a [1024, chunk] float32 block


def checked_index(index):
    """`index` if it names one of `INDEXES`; a ValueError otherwise."""
    if index not in INDEXES:
        raise ValueError(f"Unknown index {index!r}; choose from {INDEXES}.")
    return index


def _float32(chunk):
    return np.ascontiguousarray(chunk, dtype=np.float32)


def _chunks(n, chunk_size):
    return [(start, min(start + chunk_size, n)) for start in range(0, n, chunk_size)]


def _merge_top_k(sims, ids, new_sims, new_ids, k):
    """Keeps the k best of two `[n, *]` result sets, best first."""
    sims = np.concatenate([sims, new_sims], axis=1)
    ids = np.concatenate([ids, new_ids], axis=1)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, order, axis=1), np.take_along_axis(ids, order, axis=1)


def _tensorflow_search(pool_chunk):
    """A search function over one pool chunk: `queries, k -> (sims, ids)` with matmul and top_k."""
    pool_chunk = tf.constant(pool_chunk)

    def search(queries, k):
        sims, ids = [], []
        for start in range(0, len(queries), QUERY_BLOCK):
            scores = tf.matmul(tf.constant(queries[start : start + QUERY_BLOCK]), pool_chunk, transpose_b=True)
            top = tf.math.top_k(scores, k)
            sims.append(top.values.numpy())
            ids.append(top.indices.numpy().astype(np.int64))
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
        sims, ids = _merge_top_k(sims, ids, np.concatenate(chunk_sims), np.concatenate(chunk_ids), k)
    return sims, ids


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
        # faiss wants >= 39 training points per cell; small pools get fewer cells.
        nlist = max(1, min(nlist or int(4 * math.sqrt(n)), n // 39))
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


def knn(queries, pool, k, index="exact", chunk_size=100_000, verbose=False, **index_options):
    """k-NN of `queries` in `pool` with the named `index` (see `INDEXES`); options of other indexes are ignored."""
    if index in ("exact", "flat"):
        return exact_knn(queries, pool, k, chunk_size, verbose, "tensorflow" if index == "exact" else "faiss")
    search_options = {key: index_options.pop(key) for key in ("nprobe", "ef_search") if key in index_options}
    built = build_index(pool, index, chunk_size=chunk_size, verbose=verbose, **index_options)
    return search_index(built, queries, k, chunk_size=chunk_size, verbose=verbose, **search_options)
