import numpy as np
import pytest

from tf_msemb.losses.siamese import cosine_mse_loss
from tf_msemb.losses.siamese import nli_softmax_loss
from tf_msemb.losses.siamese import pair_features


def test_cosine_mse_by_hand():
    u = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    v = np.array([[3.0, 0.0], [0.0, 2.0]], np.float32)  # cosines 1 and 0
    assert float(cosine_mse_loss(u, v, np.array([0.5, 0.5]))) == pytest.approx(0.25)


def test_pair_features_and_nli_loss():
    u, v = np.array([[1.0, -2.0]], np.float32), np.array([[3.0, 1.0]], np.float32)
    np.testing.assert_allclose(pair_features(u, v), [[1.0, -2.0, 3.0, 1.0, 2.0, 3.0]])
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]], np.float32)
    expected = np.mean([-np.log(np.exp(2) / (np.exp(2) + 1 + np.exp(-1))), np.log(3.0)])
    assert float(nli_softmax_loss(logits, np.array([0, 2]))) == pytest.approx(expected, rel=1e-5)
