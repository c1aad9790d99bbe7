import numpy as np

from tf_msemb.losses.nested_similarity import nested_similarity_loss


def numpy_loss(reference, vectors, widths, top_k):
    def cosines(x):
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        return x @ x.T

    target, n = cosines(reference), len(reference)
    pair = local = 0.0
    for width in widths:
        error = np.abs(cosines(vectors[:, :width]) - target)
        pair += error[~np.eye(n, dtype=bool)].mean()
        nearest = [np.argsort(-np.where(np.arange(n) == i, -9.0, target[i]))[:top_k] for i in range(n)]
        local += np.mean([error[i, j] for i in range(n) for j in nearest[i]])
    return pair, local


def test_the_loss_is_numpys_over_the_first_dimensions_of_each_width():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(12, 8)).astype(np.float32)
    vectors = (reference @ np.linalg.qr(rng.normal(size=(8, 8)))[0]).astype(np.float32)
    got = float(nested_similarity_loss(reference, vectors, [6, 3], top_k=3))
    pair, local = numpy_loss(reference, vectors, [6, 3], 3)
    np.testing.assert_allclose(got, pair + local, rtol=1e-5)
    # Not the pairs alone, not the vectors cut from the other end.
    assert abs(got - 2 * pair) > 1e-3 and abs(got - sum(numpy_loss(reference, vectors[:, ::-1], [6, 3], 3))) > 1e-3


def test_a_rotation_at_full_width_costs_nothing_and_a_cut_costs_something():
    rng = np.random.default_rng(1)
    reference = rng.normal(size=(20, 6)).astype(np.float32)
    rotated = (reference @ np.linalg.qr(rng.normal(size=(6, 6)))[0]).astype(np.float32)
    assert float(nested_similarity_loss(reference, rotated, [6], top_k=4)) < 1e-5
    assert float(nested_similarity_loss(reference, rotated, [2], top_k=4)) > 0.05
