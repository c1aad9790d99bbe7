"""Approximate k-NN for mining: inverted cells over compressed codes, the best candidates re-scored exactly.

A query visits `probes` of the pool's `cells` k-means cells and ranks the
vectors there by their codes (`CODES`); its best `candidates` are then
re-scored in float32 from the pool itself (a float16 memmap on disk), so
the neighbours and cosines mining uses are exact ones, and the codes only
have to put the true neighbours among the candidates:

- `float16`: the vectors as they are cached (2 bytes a dimension), each
  cell scored against all the queries probing it by one matrix product
  (exact scores; many queries share a cell, so this runs at the speed of
  a matrix product, not of a scan code by code); the k best are still
  re-scored, so a cosine never depends on which queries shared a product;
- `int8`, `int4`: a byte or half a byte a dimension (faiss' `SQ8`, `SQ4`);
- `binary`: one bit a dimension plus two floats of correction (RaBitQ);
- `pq`: product quantization with 8-bit codes of `pq_bytes` bytes, after a
  random rotation (OPQ's learned one took 40-60x longer to train here and
  ranked 4-bit codes no better);
- `peer`: stopes' `OPQ64,IVF<cells>,PQ64` (64 bytes), scored by its codes
  without re-scoring, as stopes mines.

Candidates per query (`CANDIDATES`) put a source's 4 exact nearest among
them 99.4-100 % of the time on the e5-like benchmark pools with every cell
probed (`pq`: 96.5 % at 128; `tools/benchmarks/bench_scale_mining.py
--ranking`, docs/mining.md); `plan_for` chooses cells and probes from the
pool size.
"""

import dataclasses
import math

import faiss
from faiss.contrib import clustering
import numpy as np
import tensorflow as tf

CODES = ("float16", "int8", "int4", "binary", "pq", "peer")
SCALAR_CODES = {"float16": "SQfp16", "int8": "SQ8", "int4": "SQ4", "binary": "RaBitQ"}  # faiss' factory names
CANDIDATES = {"float16": 4, "int8": 16, "int4": 32, "binary": 64, "pq": 128, "peer": 0}
HNSW_CELLS = 8192  # from this many cells on, a graph over the centroids finds a vector's cells
MAX_CELLS = 2048  # plan_for's coarsest split of a pool (docs/mining.md: coarse cells keep neighbours)
QUERY_BLOCK = 4096  # queries searched and re-scored at once
MATMUL_BLOCK = 65_536  # queries a `float16` search groups by cell (more queries a cell: larger matrix products)


@dataclasses.dataclass(frozen=True)
class SearchPlan:
    """How one pool is indexed and searched.

    Attributes:
        codes: one of `CODES`.
        cells: k-means cells of the inverted index.
        probes: cells visited per query.
        candidates: neighbours by code re-scored in float32 per query (0: none, the codes' own ranking).
        train_size: vectors the cells (and the codes) are trained on.
        pq_bytes: bytes per vector of the `pq` codes.
    """

    codes: str
    cells: int
    probes: int
    candidates: int
    train_size: int
    pq_bytes: int = 48

    def __post_init__(self):
        if self.codes not in CODES:
            raise ValueError(f"Unknown codes {self.codes!r}; choose from {CODES}.")
        if self.probes > self.cells:
            raise ValueError(f"probes={self.probes} exceeds cells={self.cells}.")

    @property
    def by_matmul(self):
        """Whether cells are scored by matrix products over the vectors themselves (`_scan_cells`), not by codes."""
        return self.codes == "float16"

    def factory(self, dim):
        """The faiss `index_factory` string of this plan for `dim`-dimensional vectors."""
        quantizer = f"IVF{self.cells}" + ("_HNSW32" if self.cells >= HNSW_CELLS else "")
        if self.codes == "peer":
            return f"OPQ64,{quantizer},PQ64"
        if self.codes == "pq":
            if dim % self.pq_bytes:
                raise ValueError(f"pq_bytes={self.pq_bytes} must divide the embedding dim {dim}.")
            return f"RR{dim},{quantizer},PQ{self.pq_bytes}np"  # np: no polysemous training (minutes, unused)
        return f"{quantizer},{SCALAR_CODES[self.codes]}"


def plan_for(pool_size, codes="float16", pq_bytes=48):
    """The `SearchPlan` for a pool of `pool_size` vectors.

    Cells are a power of two near `sqrt(n)`, up to `MAX_CELLS`, trained on
    40 vectors a cell; a query probes a 32nd of them (at least 32). On e5's
    crowded vectors coarse cells keep more neighbours than fine ones at the
    same share of the pool scanned, and a 32nd is the share that kept 98 %
    of the exact candidates' partners in both directions at 1M (1,024
    cells: 98.7 / 99.7 %, where 2,048 cells and 32 probes kept 94.8 % of
    the forward ones) and at 10M (2,048 cells and 64 probes: 99.6 / 99.3 %;
    on an earlier draw of the pools 8,192 cells and 64 probes kept 93.9 % of
    the forward ones); docs/mining.md.
    """
    cells = min(MAX_CELLS, 2 ** max(4, round(math.log2(math.sqrt(max(pool_size, 1))))))
    cells = min(cells, max(16, pool_size // 39))
    probes = min(cells, max(32, cells // 32))
    return SearchPlan(codes, cells, probes, CANDIDATES[codes], min(pool_size, 40 * cells), pq_bytes)


def _float32(rows):
    return np.ascontiguousarray(rows, dtype=np.float32)


def train_index(plan, sample):
    """An empty inner-product faiss index of `plan`, its cells and codes trained on `sample` vectors.

    From `HNSW_CELLS` cells on, the cells are k-means cells found in two
    levels (faiss' `two_level_clustering`: sqrt(cells) coarse cells, then
    each split in proportion to its share of the sample), which costs
    about cells^1.5 instead of cells^2: 16,384 cells trained flat take
    hours on 2 cores; in two levels, minutes.
    """
    sample = _float32(sample)
    index = faiss.index_factory(sample.shape[1], plan.factory(sample.shape[1]), faiss.METRIC_INNER_PRODUCT)
    if plan.by_matmul:
        faiss.extract_index_ivf(index).by_residual = False  # the codes are the vectors themselves (`_scan_cells`)
    if plan.cells >= HNSW_CELLS:
        rotated = sample
        if isinstance(index, faiss.IndexPreTransform):
            for step in range(index.chain.size()):
                index.chain.at(step).train(rotated)
                rotated = index.chain.at(step).apply(rotated)
        centroids, _ = clustering.two_level_clustering(rotated, round(math.sqrt(plan.cells)), plan.cells,
                                                       clustering_niter=10, spherical=True)
        faiss.extract_index_ivf(index).quantizer.add(np.ascontiguousarray(centroids, np.float32))
    index.train(sample)
    return index


def drawn(ids, pool_size, plan, seed=0):
    """Whether each sentence (named by its id) is in `plan`'s training sample of a pool of `pool_size`.

    A hash of `(seed, id)` (SplitMix64's finalizer) below `train_size /
    pool_size`: every worker draws its own shard's share without seeing the
    others, and one machine (ids = rows) draws the same rows.
    """
    with np.errstate(over="ignore"):
        z = np.asarray(ids, np.int64).astype(np.uint64) + np.uint64((seed + 1) * 0x9E3779B97F4A7C15 % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) / 2.0**53 < plan.train_size / max(pool_size, 1)


def training_sample(pool, plan, seed=0, ids=None):
    """The rows of `pool` that `drawn` picks by their `ids` (default: row numbers), about `plan.train_size`, in
    pool order (sequential memmap reads)."""
    ids = np.arange(len(pool)) if ids is None else ids
    return _float32(pool[np.flatnonzero(drawn(ids, len(pool), plan, seed))])


def set_probes(index, plan):
    """Makes `index` visit `plan.probes` cells (and its graph quantizer look at enough centroids for them)."""
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = plan.probes
    quantizer = faiss.downcast_index(ivf.quantizer)
    if isinstance(quantizer, faiss.IndexHNSW):
        quantizer.hnsw.efSearch = max(2 * plan.probes, 64)


def add_vectors(index, vectors, ids, offset=0, chunk_size=100_000):
    """Adds `vectors[offset:offset + len(ids)]` under `ids`, `chunk_size` at a time (the same chunks everywhere, so
    the cells vectors land in never depend on who added them)."""
    for start in range(0, len(ids), chunk_size):
        chunk = ids[start : start + chunk_size]
        index.add_with_ids(_float32(vectors[offset + start : offset + start + len(chunk)]), chunk.astype(np.int64))


def search(index, plan, queries, pool, k):
    """The k nearest rows of `pool` (all of it in `index`, under row numbers) for each query: `(cosines [n, k]
    float32, rows [n, k] int64)`, best first, -1 and NaN where the index could not fill them.

    The one-shard case of `search_shard`: each query's best
    `plan.candidates` by code re-scored in float32 (without candidates,
    the codes' scores are returned).
    """
    queries = _float32(queries)
    return search_shard(index, plan, queries, probed_cells(index, plan, queries), pool, np.arange(len(pool)), k)


def _ivf_queries(index, queries):
    """`index`'s inverted lists and `queries` as they reach them (through a rotation the index applies first)."""
    queries = _float32(queries)
    if isinstance(index, faiss.IndexPreTransform):
        for step in range(index.chain.size()):
            queries = index.chain.at(step).apply(queries)
    return faiss.extract_index_ivf(index), queries


def probed_cells(index, plan, queries):
    """`(cell scores, cells)` `[n, probes]`: the cells `search` would visit for each query.

    Found once per query, they serve every shard of the pool indexed with
    the same trained cells (`search_cells`).
    """
    if not len(queries):
        return np.zeros((0, plan.probes), np.float32), np.zeros((0, plan.probes), np.int64)
    set_probes(index, plan)
    ivf, queries = _ivf_queries(index, queries)
    parts = [ivf.quantizer.search(queries[start : start + QUERY_BLOCK], plan.probes)
             for start in range(0, len(queries), QUERY_BLOCK)]
    return np.concatenate([s for s, _ in parts]), np.concatenate([c for _, c in parts])


def search_cells(index, plan, queries, cells, count):
    """Each query's best `count` by code among the vectors of its `probed_cells` in `index` (one pool shard).

    Returns `(code scores, ids)`, NaN and -1 where there were fewer. Over
    the shards of a pool, the `best_k` of these lists is what `search`
    proposes over the whole pool.
    """
    ivf, queries = _ivf_queries(index, queries)
    if plan.by_matmul:
        return _scan_cells(ivf, queries, cells[1], count)
    ivf.nprobe = plan.probes
    ivf.parallel_mode = 3  # queries spread over threads (the default splits only `search`'s)
    scores, ids = ivf.search_preassigned(queries, count, cells[1], cells[0])
    return np.where(ids < 0, np.nan, scores).astype(np.float32), ids


def _cell_vectors(ivf, cell):
    """The float32 vectors `[size, dim]` and ids `[size]` of `cell` in a `float16` index (codes are vectors)."""
    size = ivf.invlists.list_size(int(cell))
    codes = faiss.rev_swig_ptr(ivf.invlists.get_codes(int(cell)), size * ivf.code_size)
    ids = faiss.rev_swig_ptr(ivf.invlists.get_ids(int(cell)), size)
    return codes.view(np.float16).reshape(size, ivf.d).astype(np.float32), ids.copy()


def _scan_cells(ivf, queries, cells, count):
    """`search_cells` for `float16` codes: each probed cell's vectors scored against all the queries probing it
    by one matrix product (faiss' BLAS k-NN), the best `count` of every (query, cell) kept, then of every query.

    The scores are float32 inner products of the vectors themselves, so they
    are exact cosines and the ranking loses nothing inside the probed cells.
    """
    n, probes = cells.shape
    flat = cells.ravel()
    order = np.argsort(flat, kind="stable")
    starts = np.searchsorted(flat[order], np.arange(ivf.nlist + 1))
    scores = np.full((n * probes, count), np.nan, np.float32)
    ids = np.full((n * probes, count), -1, np.int64)
    for cell in np.flatnonzero(np.diff(starts)):
        vectors, cell_ids = _cell_vectors(ivf, cell)
        if not len(cell_ids):
            continue
        slots = order[starts[cell] : starts[cell + 1]]
        found = min(count, len(cell_ids))
        cell_scores, rows = faiss.knn(queries[slots // probes], vectors, found, metric=faiss.METRIC_INNER_PRODUCT)
        scores[slots, :found] = cell_scores
        ids[slots, :found] = cell_ids[rows]
    return best_k(scores.reshape(n, -1), ids.reshape(n, -1), count)


def search_shard(index, plan, queries, cells, shard, shard_ids, k):
    """Each query's k nearest in one pool shard: `(cosines, ids)` `[n, k]`, best first (NaN and -1 for none).

    `index` holds the shard's vectors `shard` under their sorted
    `shard_ids`; each query's best `plan.candidates` by code in its `cells`
    (`probed_cells`) are re-scored in float32 from `shard` (the codes'
    scores are kept without candidates). Searched shard by shard and
    merged with `best_k`, a pool is searched as stopes searches its index
    shards, every shard proposing its own candidates.
    """
    count = max(k, plan.candidates) if plan.candidates else k
    step = MATMUL_BLOCK if plan.by_matmul else QUERY_BLOCK
    sims, ids = [], []
    for start in range(0, len(queries), step):
        block = _float32(queries[start : start + step])
        scores, found = search_cells(index, plan, block, tuple(c[start : start + step] for c in cells), count)
        if plan.candidates:
            scores = cosines(block, shard, np.where(found < 0, -1, np.searchsorted(shard_ids, found)))
        scores, found = best_k(scores, found, k)
        sims.append(scores)
        ids.append(found)
    return np.concatenate(sims), np.concatenate(ids)


def merge_shards(parts, k):
    """The k best `(cosines, ids)` of each query over its `search_shard` results in several shards."""
    return best_k(np.concatenate([sims for sims, _ in parts], axis=1),
                  np.concatenate([ids for _, ids in parts], axis=1), k)


def cosines(queries, pool, candidates):
    """`[n, c]` float32 cosines of each query with its candidates (rows of `pool`; -1 gives NaN).

    Each distinct candidate is read from `pool` once (sorted, so a memmap is
    read in order).
    """
    filled = candidates >= 0
    unique, position = np.unique(np.where(filled, candidates, candidates.max(initial=0)), return_inverse=True)
    vectors = tf.gather(tf.constant(_float32(pool[unique])) if len(unique) else tf.zeros((0, queries.shape[1])),
                        position.reshape(candidates.shape))
    scores = tf.linalg.matvec(vectors, tf.constant(_float32(queries))).numpy()
    return np.where(filled, scores, np.nan).astype(np.float32)


def best_k(scores, ids, k):
    """Each row's k best `(scores, ids)` by score, then lower id; NaN scores (with id -1) last."""
    order = np.lexsort((ids, np.where(np.isnan(scores), np.inf, -scores)), axis=1)[:, :k]
    best = np.take_along_axis(scores, order, axis=1)
    return best.astype(np.float32), np.where(np.isnan(best), -1, np.take_along_axis(ids, order, axis=1))


def bytes_per_vector(index):
    """Memory a vector takes in `index`: its code and its 8-byte id."""
    return faiss.extract_index_ivf(index).code_size + 8
