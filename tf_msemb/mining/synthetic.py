"""Benchmark pools of millions of sentence vectors with the neighbour structure of real ones.

Random Gaussian vectors have no neighbourhoods: every pair is nearly
orthogonal, so an approximate index finds their planted pairs far more
easily than it finds real translations among real sentences, which crowd
into clusters. `PairModel` is fitted to real aligned pairs `(x_i, y_i)`
(an export's vectors of a parallel corpus) and draws as many new pairs as
wanted:

- sources: a mixture of `cells` Gaussians (k-means cells of the real
  sources, each with its mean, its `rank` principal directions and an
  isotropic rest), drawn and normalized;
- translations: `y = unit([x, 1] T + e)`, with `T` the ridge regression of
  the real targets on the real sources (the language shift and the
  contraction of the target side) and `e` the residual of a real pair drawn
  from the same cell.

On Multi30k en-de with multilingual-e5-small, fitted on four fifths and
compared on the held-out fifth (`fit_check`), the quantiles of 1-NN and 4-NN
cosines within the sources, of the cross-lingual 4-NN and of the pairs'
cosines and ratio margins agree within about 0.02 (docs/mining.md holds the
table). `write_pools` expands the model into float16 `.npy` pools on disk,
a chosen share of the targets planted translations of sources.
"""

import dataclasses
import json
import os

import faiss
import keras
import numpy as np

from tf_msemb.evaluation import search

MANIFEST = "pools.json"
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def unit(vectors):
    """Rows scaled to unit length."""
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@dataclasses.dataclass(frozen=True)
class PairModel:
    """Sources as a mixture of low-rank Gaussians, targets as a regression on them plus real residuals.

    Attributes:
        weights: `[C]` each cell's share of the fitted sources.
        means: `[C, d]` cell means.
        directions: `[C, r, d]` each cell's principal directions (zero rows where a cell has fewer points).
        scales: `[C, r]` standard deviations along them.
        rest: `[C]` standard deviation of every other direction of a cell.
        translation: `[d + 1, d]`: a target is `[x, 1] @ translation` plus a residual.
        residuals: `[n, d]` the fitted pairs' residuals, grouped by their source's cell.
        offsets: `[C + 1]` cell c's residuals are rows `offsets[c]:offsets[c + 1]`.
    """

    weights: np.ndarray
    means: np.ndarray
    directions: np.ndarray
    scales: np.ndarray
    rest: np.ndarray
    translation: np.ndarray
    residuals: np.ndarray
    offsets: np.ndarray

    @property
    def dim(self):
        return self.means.shape[1]

    def save(self, path):
        np.savez(path, **dataclasses.asdict(self))

    @classmethod
    def load(cls, path):
        with np.load(path) as saved:
            return cls(**{field.name: saved[field.name] for field in dataclasses.fields(cls)})

    def sources(self, n, rng):
        """`(x [n, d] unit float32, cells [n])`: n sources drawn from the mixture, in random cell order."""
        cells = rng.permutation(np.repeat(np.arange(len(self.weights)), rng.multinomial(n, self.weights)))
        x = np.empty((n, self.dim), np.float32)
        order = np.argsort(cells, kind="stable")
        bounds = np.searchsorted(cells[order], np.arange(len(self.weights) + 1))
        for cell in np.flatnonzero(np.diff(bounds)):
            rows = order[bounds[cell] : bounds[cell + 1]]
            rank = len(self.scales[cell])
            x[rows] = (self.means[cell]
                       + (rng.standard_normal((len(rows), rank), np.float32) * self.scales[cell]) @ self.directions[cell]
                       + rng.standard_normal((len(rows), self.dim), np.float32) * self.rest[cell])
        return unit(x), cells

    def translate(self, x, cells, rng):
        """Targets for sources `x` of `cells`: the regression plus a residual drawn from each source's cell."""
        counts = np.diff(self.offsets)[cells]
        picks = self.offsets[cells] + np.floor(rng.random(len(cells)) * counts).astype(np.int64)
        y = x @ self.translation[:-1] + self.translation[-1] + self.residuals[picks].astype(np.float32)
        return unit(y).astype(np.float32)

    def pairs(self, n, rng):
        """n aligned `(x, y)` pairs."""
        x, cells = self.sources(n, rng)
        return x, self.translate(x, cells, rng)


def fit_pair_model(x, y, cells=1024, rank=12, ridge=1e-2, seed=0):
    """A `PairModel` fitted to aligned unit vectors `x[i]` <-> `y[i]` (`[n, d]` each).

    `cells` k-means cells (at least 2 points each on average), `rank` principal
    directions per cell; `ridge` regularizes the regression of y on x.
    """
    x, y = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(y, np.float32)
    n, dim = x.shape
    if y.shape != x.shape:
        raise ValueError(f"Aligned pairs need equal shapes; got sources {x.shape} and targets {y.shape}.")
    if not 1 <= cells <= n // 2:
        raise ValueError(f"cells={cells} needs at least 2 fitted pairs a cell; there are {n} pairs.")
    kmeans = faiss.Kmeans(dim, cells, niter=20, seed=seed, min_points_per_centroid=1,
                          max_points_per_centroid=n, verbose=False)
    kmeans.train(x)
    assignment = kmeans.index.search(x, 1)[1][:, 0]
    with_bias = np.concatenate([x, np.ones((n, 1), np.float32)], axis=1)
    translation = np.linalg.solve(with_bias.T @ with_bias + ridge * np.eye(dim + 1), with_bias.T @ y).astype(np.float32)
    residuals = y - with_bias @ translation
    means = np.zeros((cells, dim), np.float32)
    directions = np.zeros((cells, rank, dim), np.float32)
    scales = np.zeros((cells, rank), np.float32)
    rest = np.zeros(cells, np.float32)
    for cell in range(cells):
        members = x[assignment == cell]
        if not len(members):
            continue
        means[cell] = members.mean(axis=0)
        if len(members) > 1:
            _, singular, basis = np.linalg.svd(members - means[cell], full_matrices=False)
            variance = singular**2 / (len(members) - 1)
            kept = min(rank, len(variance))
            directions[cell, :kept], scales[cell, :kept] = basis[:kept], np.sqrt(variance[:kept])
            rest[cell] = np.sqrt(variance[kept:].sum() / (dim - kept))
    order = np.argsort(assignment, kind="stable")
    counts = np.bincount(assignment, minlength=cells)
    return PairModel(weights=counts / n, means=means, directions=directions, scales=scales, rest=rest,
                     translation=translation, residuals=residuals[order].astype(np.float16),
                     offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


def neighbour_statistics(x, y, k=4):
    """Quantiles (`QUANTILES`) of what mining sees in aligned pools `x[i]` <-> `y[i]`.

    Rows: the 1st and k-th neighbour's cosine among the sources, the
    cross-lingual 1st and k-th (x in y), the pairs' cosine and their ratio
    margin (`cos / mean of both sides' k-NN means`); and `accuracy`, the
    share of sources whose nearest target is their own.
    """
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    within, _ = search.exact_knn(x, x, k + 1)
    forward, forward_ids = search.exact_knn(x, y, k)
    backward, _ = search.exact_knn(y, x, k)
    cosine = np.sum(x * y, axis=1)
    ratio = cosine / ((forward.mean(axis=1) + backward.mean(axis=1)) / 2)
    rows = {"sources 1-NN": within[:, 1], f"sources {k}-NN": within[:, k], "cross 1-NN": forward[:, 0],
            f"cross {k}-NN": forward[:, k - 1], "pair cosine": cosine, "pair ratio margin": ratio}
    statistics = {name: [float(q) for q in np.quantile(values, QUANTILES)] for name, values in rows.items()}
    return statistics | {"accuracy": float(np.mean(forward_ids[:, 0] == np.arange(len(x))))}


def fit_check(x, y, held_out=0.2, seed=0, **fit_options):
    """`(real, generated)` `neighbour_statistics`: a held-out share of the real pairs against as many drawn pairs.

    The model is fitted on the other pairs, so the check compares it with
    pairs it never saw, at the same pool size.
    """
    order = np.random.default_rng(seed).permutation(len(x))
    size = int(round(held_out * len(x)))
    test, train = order[:size], order[size:]
    model = fit_pair_model(x[train], y[train], seed=seed, **fit_options)
    generated = model.pairs(size, np.random.default_rng(seed + 1))
    return neighbour_statistics(x[test], y[test]), neighbour_statistics(*generated)


def write_pools(model, size, directory, planted=0.5, seed=0, chunk_size=100_000, verbose=False):
    """Writes `x.npy` and `y.npy` (`[size, d]` float16 unit vectors), `pairs.npy` and `MANIFEST` in `directory`.

    `planted` of the targets are translations of sources (source i's
    translation at a random position `pairs[i, 1]`, for the first
    `planted * size` sources); the rest translate fresh sources that are not
    in `x`. Returns the manifest.
    """
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    num_planted = int(round(planted * size))
    position = rng.permutation(size)  # target position of origin o: source o (o < num_planted) or a fresh one
    x = np.lib.format.open_memmap(os.path.join(directory, "x.npy"), "w+", np.float16, (size, model.dim))
    y = np.lib.format.open_memmap(os.path.join(directory, "y.npy"), "w+", np.float16, (size, model.dim))
    progress = keras.utils.Progbar(2 * size, unit_name="vector", verbose=1 if verbose else 0)
    for start in range(0, size, chunk_size):
        end = min(start + chunk_size, size)
        sources, cells = model.sources(end - start, rng)
        x[start:end] = sources
        planted_rows = slice(0, max(0, min(end, num_planted) - start))
        _scatter(y, position[start:end][planted_rows], model.translate(sources[planted_rows], cells[planted_rows], rng))
        if end > num_planted:
            fresh = slice(max(start, num_planted) - start, end - start)
            fresh_sources, fresh_cells = model.sources(fresh.stop - fresh.start, rng)
            _scatter(y, position[start:end][fresh], model.translate(fresh_sources, fresh_cells, rng))
        progress.add(2 * (end - start))
    x.flush()
    y.flush()
    pairs = np.stack([np.arange(num_planted), position[:num_planted]], axis=1)
    np.save(os.path.join(directory, "pairs.npy"), pairs)
    manifest = {"size": size, "dim": model.dim, "planted": num_planted, "seed": seed, "cells": len(model.weights),
                "rank": model.directions.shape[1], "fitted_pairs": len(model.residuals)}
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def _scatter(array, rows, values):
    """`array[rows] = values`, written in row order (sequential pages of a memmap)."""
    order = np.argsort(rows)
    array[rows[order]] = values[order]


def read_pools(directory):
    """`(x, y, pairs, manifest)` of `write_pools`' directory, the pools as read-only memmaps."""
    with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
        manifest = json.load(f)
    x, y = (np.load(os.path.join(directory, f"{side}.npy"), mmap_mode="r") for side in ("x", "y"))
    return x, y, np.load(os.path.join(directory, "pairs.npy")), manifest
