"""The Matryoshka loss: each width's prefix re-normalized, the losses weighted and summed; widths checked."""

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.losses.matryoshka import check_widths
from tf_msemb.losses.matryoshka import matryoshka_loss
from tf_msemb.losses.matryoshka import nested_vectors


def _unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_matryoshka_loss_against_numpy_at_each_width():
    """A loss that reads vector lengths (sum of squared distances) tells re-normalized prefixes from raw ones."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 12)).astype(np.float32), rng.normal(size=(5, 12)).astype(np.float32)

    def loss_of(vectors):
        return {"loss": tf.reduce_sum((vectors["x"] - vectors["y"]) ** 2), "width": tf.shape(vectors["x"])[1]}

    results = matryoshka_loss(loss_of, {"x": tf.constant(x), "y": tf.constant(y)}, [12, 6, 3], [1.0, 0.5, 2.0])
    expected = sum(w * ((_unit(x[:, :d]) - _unit(y[:, :d])) ** 2).sum() for d, w in [(12, 1.0), (6, 0.5), (3, 2.0)])
    assert float(results["loss"]) == pytest.approx(expected, rel=1e-5)
    assert int(results["width"]) == 12  # values other than the loss come from the widest
    np.testing.assert_allclose(nested_vectors(tf.constant(x), 4).numpy(), _unit(x[:, :4]), rtol=1e-6)


def test_widths_are_sorted_widest_first_and_bad_ones_refused():
    assert check_widths([64, 384, 128], None, 384) == ([384, 128, 64], [1.0, 1.0, 1.0])
    assert check_widths([8, 16], [0.5, 2.0], 16) == ([16, 8], [2.0, 0.5])
    for widths, weights in [([], None), ([8, 32], None), ([8, 8], None), ([0], None), ([8, 4], [1.0])]:
        with pytest.raises(ValueError, match="Matryoshka widths"):
            check_widths(widths, weights, 16)
