"""Margin mining of two large pools on one machine, in shards written to a work directory, resumable.

Steps, each a set of files written whole (under a temporary name, then
renamed), so a run killed anywhere and started again with the same
arguments redoes only the shard it was in:

1. `index.<side>.trained.faiss`: each pool's cells and codes, trained on a
   sample of it (`approximate.train_index`, rows `approximate.drawn` picks);
2. `index.<side>.<shard>.faiss`: each pool shard's codes, added to a copy of
   the trained index;
3. `knn.<side>.<shard>.npz`: each query shard's k nearest in the other pool:
   its cells probed once, every pool shard searched and re-scored
   (`approximate.search_shard`), the k best kept (`approximate.merge_shards`);
4. `candidates.npz`: each sentence's best candidate by margin, both
   directions (`evaluation.mining.best_candidates` over the k-NN and the
   neighbours' k-NN means);
5. the selection (`selection`) and threshold, returned.

Sides are `x` (sources, the forward queries) and `y` (targets). The Beam
pipeline (`tf_msemb.pipelines.mine --codes`) runs the same steps on the
same shards, so both mine the same pairs.
"""

import json
import os

import faiss
import keras
import numpy as np

from tf_msemb.evaluation import mining
from tf_msemb.files import write_atomically
from tf_msemb.files import write_json_atomically
from tf_msemb.files import write_npz_atomically
from tf_msemb.mining import approximate
from tf_msemb.mining import selection as selections

SIDES = ("x", "y")


def _other(side):
    return "y" if side == "x" else "x"


class MiningRun:
    """Mines pools `x` and `y` (`[n, d]` unit vectors, float16 memmaps are fine) with `plan`s in `work_dir`.

    Args:
        x, y: the source and target pools.
        work_dir: where every step's files go; a rerun reuses the finished ones. It belongs to one pair of
            pools: the settings (sizes, plans, k, ...) are checked, the vectors are not.
        plans: `{side: approximate.SearchPlan}` of the index over each side's pool.
        k: neighbours per direction of the margin.
        margin, pick: as `evaluation.mining.best_candidates`.
        shard_size: vectors per index shard and queries per search shard.
        seed: of the training samples.
        shards: `{side: [row arrays]}`, each side's shards (default: `shard_size` consecutive rows each).
        ids: `{side: [n] int64}`, each row's sentence id, which picks the training sample (default: row numbers;
            the Beam pipeline's are its encode ids).
    """

    def __init__(self, x, y, work_dir, plans, k=4, margin="ratio", pick=None, shard_size=1_000_000, seed=0,
                 verbose=False, shards=None, ids=None):
        self.pools, self.work_dir, self.plans = {"x": x, "y": y}, work_dir, plans
        self.k, self.margin, self.pick, self.seed, self.verbose = k, margin, pick, seed, verbose
        self.ids = ids or {}
        self.shards = shards or {side: [np.arange(start, min(start + shard_size, len(pool)))
                                        for start in range(0, len(pool), shard_size)]
                                 for side, pool in self.pools.items()}
        os.makedirs(work_dir, exist_ok=True)
        settings = {"sizes": {side: len(pool) for side, pool in self.pools.items()}, "k": k, "margin": margin,
                    "pick": pick, "seed": seed, "plans": {side: vars(plan) for side, plan in plans.items()},
                    "shards": {side: [len(rows) for rows in shards] for side, shards in self.shards.items()}}
        self._check_settings(settings)

    def _check_settings(self, settings):
        """Records the run's settings; a work directory holding another run's files is refused."""
        path = self._path("settings.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                if json.load(f) != settings:
                    raise ValueError(f"{self.work_dir} holds a mining run with other settings; use another work_dir.")
            return
        write_json_atomically(path, settings)

    def _path(self, name):
        return os.path.join(self.work_dir, name)

    def _log(self, message):
        if self.verbose:
            print(f"[mining] {message}", flush=True)

    def trained_index(self, side):
        """The empty index over `side`'s pool, its cells and codes trained (step 1)."""
        path = self._path(f"index.{side}.trained.faiss")
        if not os.path.exists(path):
            plan = self.plans[side]
            self._log(f"training {plan.factory(self.pools[side].shape[1])} on {plan.train_size} vectors of {side}")
            index = approximate.train_index(plan, approximate.training_sample(self.pools[side], plan, self.seed,
                                                                            self.ids.get(side)))
            write_atomically(path, lambda partial: faiss.write_index(index, partial))
        return faiss.read_index(path)

    def shard_index(self, side, number):
        """The index over shard `number` of `side`'s pool, its rows added under their row numbers (step 2)."""
        path = self._path(f"index.{side}.{number:05d}.faiss")
        if not os.path.exists(path):
            part = self.trained_index(side)
            rows = self.shards[side][number]
            approximate.add_vectors(part, _rows(self.pools[side], rows), rows)
            write_atomically(path, lambda partial: faiss.write_index(part, partial))
        return faiss.read_index(path)

    def nearest(self, side, rows):
        """`(cosines, rows)` `[len(rows), k]` of `side`'s `rows`' k nearest in the other pool: their cells probed
        once, every shard of the other pool searched and re-scored, the k best kept (building the shard indexes
        not yet built)."""
        other, plan = _other(side), self.plans[_other(side)]
        queries = np.asarray(_rows(self.pools[side], rows), np.float32)
        cells = approximate.probed_cells(self.trained_index(other), plan, queries)
        best = None
        for number, pool_rows in enumerate(self.shards[other]):
            part = approximate.search_shard(self.shard_index(other, number), plan, queries, cells,
                                            _rows(self.pools[other], pool_rows), pool_rows, self.k)
            best = part if best is None else approximate.merge_shards([best, part], self.k)
        return best

    def knn(self, side):
        """`(cosines, rows)` `[n, k]` of every `side` sentence's k nearest in the other pool (step 3)."""
        paths = [self._path(f"knn.{side}.{number:05d}.npz") for number in range(len(self.shards[side]))]
        if not all(os.path.exists(path) for path in paths):
            progress = keras.utils.Progbar(len(self.pools[side]), unit_name="query", verbose=1 if self.verbose else 0)
            for path, rows in zip(paths, self.shards[side]):
                if not os.path.exists(path):
                    sims, found = self.nearest(side, rows)
                    write_npz_atomically(path, sims=sims, rows=found)
                progress.add(len(rows))
        sims = np.full((len(self.pools[side]), self.k), np.nan, np.float32)
        found = np.full((len(self.pools[side]), self.k), -1, np.int64)
        for path, rows in zip(paths, self.shards[side]):
            with np.load(path) as part:
                sims[rows], found[rows] = part["sims"], part["rows"]
        return sims, found

    def candidates(self):
        """`{side: (scores, partners)}`: each sentence's best candidate in the other pool and its margin (step 4).

        A sentence with no candidate scores -inf.
        """
        path = self._path("candidates.npz")
        if not os.path.exists(path):
            knn = {side: self.knn(side) for side in SIDES}
            means = {side: mining.filled_mean(knn[side][0]) for side in SIDES}
            found = {}
            for side in SIDES:
                sims, rows = knn[side]
                neighbour_means = np.where(rows >= 0, means[_other(side)][np.maximum(rows, 0)], np.nan)
                found[side] = mining.best_candidates(sims, rows, means[side], neighbour_means, self.margin, self.pick)
            write_npz_atomically(path, **{f"{side}_{name}": array for side in SIDES
                               for name, array in zip(("scores", "partners"), found[side])})
        with np.load(path) as saved:
            return {side: (saved[f"{side}_scores"], saved[f"{side}_partners"]) for side in SIDES}

    def pairs(self, selection="max", threshold=None):
        """The mined `(scores, x rows, y rows)`, best first (step 5); `selection` as `evaluation.mining.select`."""
        if selection not in mining.SELECTIONS:
            raise ValueError(f"Unknown selection {selection!r}; choose from {mining.SELECTIONS}.")
        found = self.candidates()
        forward = _candidate_arrays(*found["x"], forward=True)
        backward = _candidate_arrays(*found["y"], forward=False)
        if selection == "max":
            scores, xs, ys = selections.select_max(forward, backward)
        elif selection == "intersect":
            scores, xs, ys = selections.intersect(forward, backward)
        else:
            scores, xs, ys = forward if selection == "forward" else backward
            order = selections.best_first(scores, xs, ys)
            scores, xs, ys = scores[order], xs[order], ys[order]
        if threshold is not None:
            keep = scores >= threshold
            scores, xs, ys = scores[keep], xs[keep], ys[keep]
        return scores, xs, ys


def _rows(pool, rows):
    """`pool[rows]`; a slice (a view, read as used) when `rows` are consecutive, as the default shards are."""
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows) and np.all(np.diff(rows) == 1):
        return pool[rows[0] : rows[-1] + 1]
    return pool[rows]


def _candidate_arrays(scores, partners, forward):
    """`(scores, x rows, y rows)` of one direction's candidates that exist."""
    queries = np.flatnonzero(np.isfinite(scores))
    xs, ys = (queries, partners[queries]) if forward else (partners[queries], queries)
    return scores[queries], xs.astype(np.int64), ys.astype(np.int64)
