"""Hard negatives mined with a previous model: near, wrong translations (seed 004 Sec. 4.2 appends 5 per pair).

For every pair `(x_i, y_i)` the source `x_i` is searched among the corpus'
distinct targets; its true translations (every target the corpus pairs with
`x_i`), and every target as similar to one of them as `ceiling` or more
(near-duplicates), would be false negatives and are skipped; the `k`
nearest remaining targets are the pair's hard negatives. Pairs are processed in chunks whose results are saved as they
finish, so an interrupted run started again continues after the last one.
"""

import os

import keras
import numpy as np

NO_NEGATIVES = -1  # the row of a pair left with fewer than k negatives
_BLOCK = 1024


def choose_negatives(ids, true_ids, pool, k, ceiling):
    """`[n, k]` pool indices of each row's first `k` neighbours that are neither a truth nor a near-duplicate of one.

    Args:
        ids: `[n, m]` neighbour indices into `pool`, best first (-1 where an index left one unfilled).
        true_ids: `[n]` the index of each row's true translation in `pool`, or `[n, t]` the indices of
            all of them (a source the corpus pairs with several targets), -1 where a row has fewer.
        pool: `[p, d]` unit vectors (array or memmap).
        k: negatives per row.
        ceiling: a neighbour whose cosine with a true translation is at least this is a near-duplicate.

    Rows with fewer than `k` acceptable neighbours are all `NO_NEGATIVES`.
    """
    true_ids = np.asarray(true_ids).reshape(len(ids), -1)
    known = true_ids >= 0
    truths = np.asarray(pool[np.maximum(true_ids, 0).ravel()], np.float32).reshape(*true_ids.shape, -1)
    found = np.maximum(ids, 0)
    neighbours = np.asarray(pool[found.ravel()], np.float32).reshape(*ids.shape, -1)
    similarity = np.where(known[:, None, :], np.einsum("nmd,ntd->nmt", neighbours, truths), -np.inf).max(axis=-1)
    is_truth = (ids[:, :, None] == np.where(known, true_ids, -2)[:, None, :]).any(axis=-1)
    acceptable = (ids >= 0) & ~is_truth & (similarity < ceiling)
    chosen = np.full((len(ids), k), NO_NEGATIVES, np.int64)
    for row in np.flatnonzero(acceptable.sum(axis=1) >= k):
        chosen[row] = ids[row][acceptable[row]][:k]
    return chosen


def translations_of_sources(rows, target_ids):
    """`[n, t]` pool ids of every target the corpus pairs with each row's source, its own first; -1 pads."""
    of_source = {}
    for src, tgt in rows:
        of_source.setdefault(src, []).append(target_ids[tgt])
    width = max((len(set(ids)) for ids in of_source.values()), default=1)
    true_ids = np.full((len(rows), width), -1, np.int64)
    for row, (src, tgt) in enumerate(rows):
        own = target_ids[tgt]
        ids = [own, *sorted(set(of_source[src]) - {own})]
        true_ids[row, : len(ids)] = ids
    return true_ids


def mine_hard_negatives(queries, pool, true_ids, k, ceiling, search, work_dir, chunk_size=50_000, verbose=True):
    """`[n, k]` hard negatives (pool indices, `NO_NEGATIVES` rows for pairs without enough), chunk by chunk.

    Args:
        queries: `[n, d]` unit vectors of the pairs' sources (array or memmap).
        pool: `[p, d]` unit vectors of the distinct targets.
        true_ids: `[n]` each pair's target in `pool`, or `[n, t]` every target of the pair's source
            (see `choose_negatives`).
        k: negatives per pair.
        ceiling: near-duplicate similarity (see `choose_negatives`).
        search: `queries -> (sims, ids)`, the neighbours of a chunk of queries in `pool`, best first.
        work_dir: where each chunk's result is saved; a finished chunk found there is not searched again.
        chunk_size: pairs per chunk.
    """
    os.makedirs(work_dir, exist_ok=True)
    chunks = []
    progress = keras.utils.Progbar(len(queries), unit_name="pair", verbose=1 if verbose else 0)
    for start in range(0, len(queries), chunk_size):
        end = min(start + chunk_size, len(queries))
        path = os.path.join(work_dir, f"chunk-{start:012d}.npy")
        if not os.path.exists(path):
            _, ids = search(np.asarray(queries[start:end], np.float32))
            # Blocks of rows keep the gathered neighbour vectors (rows x neighbours x dim) small.
            truths = true_ids[start:end]
            chosen = [choose_negatives(ids[row : row + _BLOCK], truths[row : row + _BLOCK], pool, k, ceiling)
                      for row in range(0, len(ids), _BLOCK)]
            partial = f"{path}.partial.npy"
            np.save(partial, np.concatenate(chosen))
            os.replace(partial, path)
        chunks.append(np.load(path))
        progress.update(end)
    return np.concatenate(chunks) if chunks else np.zeros((0, k), np.int64)
