import numpy as np
import pytest

from tf_msemb.mining import synthetic


def _clustered_pairs(n=3000, dim=32, clusters=30, seed=0):
    """Sources in clusters; targets a fixed rotation and shift of them plus noise (a 'language')."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    x = synthetic.unit(centres[rng.integers(0, clusters, n)] + 0.8 * rng.standard_normal((n, dim)))
    rotation, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    shift = 0.5 * synthetic.unit(rng.standard_normal((1, dim)))
    y = synthetic.unit(0.9 * x + 0.2 * x @ rotation + shift + 0.1 * rng.standard_normal((n, dim)))
    return x.astype(np.float32), y.astype(np.float32)


def test_drawn_pairs_have_the_held_out_pairs_neighbour_structure():
    x, y = _clustered_pairs()
    real, drawn = synthetic.fit_check(x, y, cells=60, rank=4)
    for name in real:
        if name != "accuracy":  # quartiles and median close; the 5 % and 95 % tails of 600 pairs are noisier
            np.testing.assert_allclose(drawn[name][1:4], real[name][1:4], atol=0.025, err_msg=name)
            np.testing.assert_allclose(drawn[name], real[name], atol=0.08, err_msg=name)
    assert abs(drawn["accuracy"] - real["accuracy"]) < 0.1
    # The check can fail: one Gaussian for all sources (no clusters) misses the neighbourhoods.
    _, one_cell = synthetic.fit_check(x, y, cells=1, rank=4)
    assert one_cell["sources 1-NN"][2] < real["sources 1-NN"][2] - 0.1


def test_translations_follow_the_fitted_map_not_the_identity():
    x, y = _clustered_pairs()
    model = synthetic.fit_pair_model(x, y, cells=60, rank=4)
    sources, targets = model.pairs(3000, np.random.default_rng(2))
    assert abs(np.median(np.sum(sources * targets, axis=1)) - np.median(np.sum(x * y, axis=1))) < 0.03
    # The target side sits where the real targets do, not where the sources do (the shift and rotation).
    language = np.linalg.norm(y.mean(axis=0) - x.mean(axis=0))
    assert np.linalg.norm(targets.mean(axis=0) - y.mean(axis=0)) < 0.15 * language


def test_write_pools_plants_translations_at_recorded_positions(tmp_path):
    x, y = _clustered_pairs()
    model = synthetic.fit_pair_model(x, y, cells=60, rank=4)
    path = tmp_path / "model.npz"
    model.save(path)
    manifest = synthetic.write_pools(synthetic.PairModel.load(path), 2500, tmp_path / "pools", planted=0.4,
                                     chunk_size=700)
    xs, ys, pairs, read_manifest = synthetic.read_pools(tmp_path / "pools")
    assert manifest == read_manifest and manifest["planted"] == 1000
    assert xs.dtype == np.float16 and xs.shape == ys.shape == (2500, 32)
    np.testing.assert_allclose(np.linalg.norm(ys.astype(np.float32), axis=1), 1, atol=2e-3)
    assert len(set(pairs[:, 1])) == 1000 and pairs[:, 0].tolist() == list(range(1000))
    sources, targets = xs.astype(np.float32), ys.astype(np.float32)
    planted = np.sum(sources[pairs[:, 0]] * targets[pairs[:, 1]], axis=1)
    # Each planted target is nearer its source than the source's other targets are, for most sources.
    nearest = np.argmax(sources[pairs[:, 0]] @ targets.T, axis=1)
    assert np.mean(nearest == pairs[:, 1]) > 0.7
    assert np.median(planted) > np.median(np.sum(sources[1500:] * targets[1500:], axis=1)) + 0.2
    # No target position is written twice or left empty.
    assert np.all(np.isfinite(targets)) and np.all(np.abs(np.linalg.norm(targets, axis=1) - 1) < 2e-3)
    # The same seed writes the same pools.
    synthetic.write_pools(model, 2500, tmp_path / "again", planted=0.4, chunk_size=700)
    np.testing.assert_array_equal(np.load(tmp_path / "again" / "y.npy"), ys)


def test_fit_refuses_too_many_cells():
    x, y = _clustered_pairs(n=100)
    with pytest.raises(ValueError, match="cells=60 needs at least 2"):
        synthetic.fit_pair_model(x, y, cells=60)
