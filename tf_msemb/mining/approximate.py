"""Approximate k-NN for mining: inverted cells over compressed codes, the best candidates re-scored exactly.

A query visits `probes` of the pool's `cells` k-means cells and ranks the
vectors there by their codes (`CODES`); its best `candidates` are then
re-scored in float32 from the pool itself (a float16 memmap on disk), so
the neighbours and cosines mining uses are exact ones, and the codes only
have to put the true neighbours among the candidates:

- `float16`: the vectors as they are cached (2 bytes a dimension);
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
import numpy as np
import tensorflow as tf

CODES = ("float16", "int8", "int4", "binary", "pq", "peer")
SCALAR_CODES = {"float16": "SQfp16", "int8": "SQ8", "int4": "SQ4", "binary": "RaBitQ"}  # faiss' factory names
CANDIDATES = {"float16": 16, "int8": 16, "int4": 32, "binary": 64, "pq": 128, "peer": 0}
HNSW_CELLS = 8192  # from this many cells on, a graph over the centroids finds a vector's cells
QUERY_BLOCK = 4096  # queries searched and re-scored at once


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


def plan_for(pool_size, codes="binary", pq_bytes=48):
    """The `SearchPlan` for a pool of `pool_size` vectors.

    Cells grow as the square root of the pool (a power of two near
    `2 sqrt(n)`: faiss' guidelines and stopes take 4-16 sqrt(n), which
    on 2 cores would spend longer training the cells than searching them),
    trained on 40 vectors a cell; probes are the fewest that kept 98 % of
    exact mining's candidates on the benchmark pools (docs/mining.md).
    """
    cells = 2 ** max(4, round(math.log2(2 * math.sqrt(max(pool_size, 1)))))
    cells = min(cells, max(16, pool_size // 39))
    probes = min(cells, 64 if pool_size >= 3_000_000 else 32)
    return SearchPlan(codes, cells, probes, CANDIDATES[codes], min(pool_size, 40 * cells), pq_bytes)


def _float32(rows):
    return np.ascontiguousarray(rows, dtype=np.float32)


def train_index(plan, sample):
    """An empty inner-product faiss index of `plan`, its cells and codes trained on `sample` vectors."""
    sample = _float32(sample)
    index = faiss.index_factory(sample.shape[1], plan.factory(sample.shape[1]), faiss.METRIC_INNER_PRODUCT)
    index.train(sample)
    return index


def training_sample(pool, plan, seed=0):
    """`plan.train_size` rows of `pool`, drawn without replacement in pool order (sequential reads of a memmap)."""
    rows = np.sort(np.random.default_rng(seed).choice(len(pool), size=min(plan.train_size, len(pool)), replace=False))
    return _float32(pool[rows])


def set_probes(index, plan):
    """Makes `index` visit `plan.probes` cells (and its graph quantizer look at enough centroids for them)."""
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = plan.probes
    quantizer = faiss.downcast_index(ivf.quantizer)
    if isinstance(quantizer, faiss.IndexHNSW):
        quantizer.hnsw.efSearch = max(2 * plan.probes, 64)


def add_rows(index, pool, start, end, chunk_size=100_000):
    """Adds `pool[start:end]` to `index` with their row numbers as ids (read a chunk at a time)."""
    for chunk_start in range(start, end, chunk_size):
        chunk_end = min(chunk_start + chunk_size, end)
        index.add_with_ids(_float32(pool[chunk_start:chunk_end]), np.arange(chunk_start, chunk_end, dtype=np.int64))


def search(index, plan, queries, pool, k):
    """The k nearest rows of `pool` for each query: `(cosines [n, k] float32, rows [n, k] int64)`, best first.

    With `plan.candidates`, the index proposes that many per query and
    `rescore` ranks them by their exact float32 cosines; without, the
    codes' scores are returned. Rows the index could not fill are -1 with
    cosine NaN.
    """
    set_probes(index, plan)
    wanted = max(k, plan.candidates) if plan.candidates else k
    sims, ids = [], []
    for start in range(0, len(queries), QUERY_BLOCK):
        block = _float32(queries[start : start + QUERY_BLOCK])
        scores, rows = index.search(block, wanted)
        if plan.candidates:
            scores, rows = rescore(block, pool, rows, k)
        else:
            scores = np.where(rows < 0, np.nan, scores).astype(np.float32)
        sims.append(scores)
        ids.append(rows)
    return np.concatenate(sims), np.concatenate(ids)


def rescore(queries, pool, candidates, k):
    """The k best of each query's `candidates` (`[n, c]` rows of `pool`, -1 for none) by exact float32 cosine.

    Each distinct candidate is read from `pool` once per call (sorted, so a
    memmap is read in order). Returns `(cosines, rows)`, best first, with -1
    and NaN where a query had fewer than k candidates.
    """
    filled = candidates >= 0
    unique, position = np.unique(np.where(filled, candidates, candidates.max(initial=0)), return_inverse=True)
    vectors = tf.gather(tf.constant(_float32(pool[unique])) if len(unique) else tf.zeros((0, queries.shape[1])),
                        position.reshape(candidates.shape))
    scores = tf.linalg.matvec(vectors, tf.constant(queries)).numpy()
    scores = np.where(filled, scores, -np.inf)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    best = np.take_along_axis(scores, top, axis=1)
    rows = np.where(np.isfinite(best), np.take_along_axis(candidates, top, axis=1), -1)
    return np.where(np.isfinite(best), best, np.nan).astype(np.float32), rows.astype(np.int64)


def bytes_per_vector(index):
    """Memory a vector takes in `index`: its code and its 8-byte id."""
    return faiss.extract_index_ivf(index).code_size + 8
