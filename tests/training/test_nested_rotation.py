import numpy as np

from tf_msemb.losses.nested_similarity import nested_similarity_loss
from tf_msemb.training.nested_rotation import fit_nested_rotation


def unit_vectors(n, rng):
    """Unit vectors sharing one large mean direction (as e5's do) around 12 clusters: uncentred principal axes
    put that direction first, so a cut inflates every cosine, which a turn can undo."""
    centres = np.random.default_rng(1).normal(size=(12, 19))
    spread = centres[rng.integers(0, 12, n)] + 0.5 * rng.normal(size=(n, 19))
    spread = np.concatenate([np.zeros((n, 1)), spread / np.linalg.norm(spread, axis=1, keepdims=True)], axis=1)
    x = 0.45 * spread
    x[:, 0] += 0.9
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_the_turned_axes_stay_a_rotation_and_keep_cut_cosines_better_on_unseen_vectors():
    rng = np.random.default_rng(0)
    train, unseen = unit_vectors(1500, rng), unit_vectors(400, rng)
    _, eigenvectors = np.linalg.eigh(train.T @ train)
    axes = eigenvectors[:, ::-1].copy()
    turned, before, after = fit_nested_rotation(train, axes, [8, 4], steps=150, batch_size=256,
                                                learning_rate=0.01, top_k=5)
    np.testing.assert_allclose(turned.T @ turned, np.eye(20), atol=1e-4)
    assert after < 0.8 * before

    def loss(rotation):
        return float(nested_similarity_loss(unseen, unseen @ rotation, [8, 4], top_k=5))

    assert loss(turned) < 0.8 * loss(axes)
    # Full width: every cosine as it was.
    np.testing.assert_allclose((unseen @ turned) @ (unseen @ turned).T, unseen @ unseen.T, atol=1e-4)
