"""Small clustered pools with planted translations, shared by the mining tests."""

import numpy as np

from tf_msemb.mining import synthetic


def clustered_pools(n_x=1500, n_y=1300, dim=64, planted=800, seed=0):
    """`(x, y, pairs)`: float16 unit pools in 40 clusters; `y[pairs[:, 1]]` translate `x[pairs[:, 0]]`."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, dim))

    def sources(n):
        return synthetic.unit(centres[rng.integers(0, 40, n)] + 0.8 * rng.standard_normal((n, dim)))

    x = sources(n_x)
    shift = 0.5 * synthetic.unit(rng.standard_normal((1, dim)))
    origins = np.concatenate([x[:planted], sources(n_y - planted)])
    y = synthetic.unit(0.9 * origins + shift + 0.1 * rng.standard_normal((n_y, dim)))
    position = rng.permutation(n_y)
    shuffled = np.empty_like(y)
    shuffled[position] = y
    pairs = np.stack([np.arange(planted), position[:planted]], axis=1)
    return x.astype(np.float16), shuffled.astype(np.float16), pairs
