"""Margin mining of two large pools on one machine, in shards written to a work directory, resumable.

Steps, each a set of files written whole (under a temporary name, then
renamed), so a run killed anywhere and started again with the same
arguments redoes only the shard it was in:

1. `index.<side>.trained.faiss`: each pool's cells and codes, trained on a
   sample of it (`approximate.train_index`);
2. `index.<side>.<shard>.faiss`: each pool shard's codes, added to a copy of
   the trained index (merged into one index when searched);
3. `knn.<side>.<shard>.npz`: each query shard's k nearest in the other pool,
   re-scored exactly (`approximate.search`);
4. `candidates.npz`: each sentence's best candidate by margin, both
   directions (`evaluation.mining.best_candidates` over the k-NN and the
   neighbours' k-NN means);
5. the selection (`selection`) and threshold, returned.

Sides are `x` (sources, the forward queries) and `y` (targets).
"""

import json
import os

import faiss
import keras
import numpy as np

from tf_msemb.evaluation import mining
from tf_msemb.mining import approximate
from tf_msemb.mining import selection as selections

SIDES = ("x", "y")


def _other(side):
    return "y" if side == "x" else "x"


def _write_atomically(path, write):
    partial = f"{path}.partial"
    write(partial)
    os.replace(partial, path)


def _save_npz(path, **arrays):
    def write(partial):
        with open(partial, "wb") as f:
            np.savez(f, **arrays)

    _write_atomically(path, write)


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
    """

    def __init__(self, x, y, work_dir, plans, k=4, margin="ratio", pick=None, shard_size=1_000_000, seed=0,
                 verbose=False):
        self.pools, self.work_dir, self.plans = {"x": x, "y": y}, work_dir, plans
        self.k, self.margin, self.pick, self.shard_size, self.seed = k, margin, pick, shard_size, seed
        self.verbose = verbose
        os.makedirs(work_dir, exist_ok=True)
        settings = {"sizes": {side: len(pool) for side, pool in self.pools.items()}, "k": k, "margin": margin,
                    "pick": pick, "shard_size": shard_size, "seed": seed,
                    "plans": {side: vars(plan) for side, plan in plans.items()}}
        self._check_settings(settings)

    def _check_settings(self, settings):
        """Records the run's settings; a work directory holding another run's files is refused."""
        path = self._path("settings.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                if json.load(f) != settings:
                    raise ValueError(f"{self.work_dir} holds a mining run with other settings; use another work_dir.")
            return
        def write(partial):
            with open(partial, "w", encoding="utf-8") as f:
                json.dump(settings, f)

        _write_atomically(path, write)

    def _path(self, name):
        return os.path.join(self.work_dir, name)

    def _shards(self, side):
        n = len(self.pools[side])
        return [(start, min(start + self.shard_size, n)) for start in range(0, n, self.shard_size)]

    def _log(self, message):
        if self.verbose:
            print(f"[mining] {message}", flush=True)

    def trained_index(self, side):
        """The empty index over `side`'s pool, its cells and codes trained (step 1)."""
        path = self._path(f"index.{side}.trained.faiss")
        if not os.path.exists(path):
            plan = self.plans[side]
            self._log(f"training {plan.factory(self.pools[side].shape[1])} on {plan.train_size} vectors of {side}")
            index = approximate.train_index(plan, approximate.training_sample(self.pools[side], plan, self.seed))
            _write_atomically(path, lambda partial: faiss.write_index(index, partial))
        return faiss.read_index(path)

    def index(self, side):
        """The index over all of `side`'s pool: each shard's codes added (step 2), merged."""
        trained = faiss.serialize_index(self.trained_index(side))
        shards = self._shards(side)
        progress = keras.utils.Progbar(len(self.pools[side]), unit_name="vector", verbose=1 if self.verbose else 0)
        merged = faiss.deserialize_index(trained)
        for number, (start, end) in enumerate(shards):
            path = self._path(f"index.{side}.{number:05d}.faiss")
            if not os.path.exists(path):
                part = faiss.deserialize_index(trained)
                approximate.add_rows(part, self.pools[side], start, end)
                _write_atomically(path, lambda partial, part=part: faiss.write_index(part, partial))
            part = faiss.read_index(path)  # held: the extracted IVF part is owned by it
            faiss.extract_index_ivf(merged).merge_from(faiss.extract_index_ivf(part), 0)
            progress.add(end - start)
        return merged

    def knn(self, side):
        """`(cosines, rows)` `[n, k]` of every `side` sentence's k nearest in the other pool (step 3)."""
        other = _other(side)
        shards = self._shards(side)
        paths = [self._path(f"knn.{side}.{number:05d}.npz") for number in range(len(shards))]
        if not all(os.path.exists(path) for path in paths):
            index = self.index(other)
            progress = keras.utils.Progbar(len(self.pools[side]), unit_name="query", verbose=1 if self.verbose else 0)
            for path, (start, end) in zip(paths, shards):
                if not os.path.exists(path):
                    sims, rows = approximate.search(index, self.plans[other], self.pools[side][start:end],
                                                    self.pools[other], self.k)
                    _save_npz(path, sims=sims, rows=rows)
                progress.add(end - start)
            del index
        sims, rows = [], []
        for path in paths:
            with np.load(path) as part:
                sims.append(part["sims"])
                rows.append(part["rows"])
        return np.concatenate(sims), np.concatenate(rows)

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
            _save_npz(path, **{f"{side}_{name}": array for side in SIDES
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


def _candidate_arrays(scores, partners, forward):
    """`(scores, x rows, y rows)` of one direction's candidates that exist."""
    queries = np.flatnonzero(np.isfinite(scores))
    xs, ys = (queries, partners[queries]) if forward else (partners[queries], queries)
    return scores[queries], xs.astype(np.int64), ys.astype(np.int64)
