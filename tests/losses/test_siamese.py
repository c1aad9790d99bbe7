import numpy as np
import pytest

from tf_msemb.losses.siamese import cosent_loss
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


def _cosent_numpy(u, v, gold, scale):
    cos = np.sum(u * v, -1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))
    terms = [scale * (cos[j] - cos[i]) for i in range(len(gold)) for j in range(len(gold)) if gold[i] > gold[j]]
    return np.log1p(np.sum(np.exp(terms)))


def test_cosent_against_numpy_with_ties():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(7, 5)).astype(np.float32), rng.normal(size=(7, 5)).astype(np.float32)
    gold = np.array([0.2, 0.8, 0.8, 0.0, 1.0, 0.4, 0.2], np.float32)  # ties give no term
    assert float(cosent_loss(u, v, gold, scale=20.0)) == pytest.approx(_cosent_numpy(u, v, gold, 20.0), rel=1e-5)
    assert float(cosent_loss(u, v, gold, scale=5.0)) == pytest.approx(_cosent_numpy(u, v, gold, 5.0), rel=1e-5)


def test_cosent_asks_order_not_level():
    """Cosines 0.95 / 0.75 in the gold order: CoSENT is near its floor, the regression to 1 / 0 is not; the
    reversed order costs CoSENT, the same level costs the regression alike."""
    u = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    high, low = np.arccos(0.95), np.arccos(0.75)
    v = np.array([[np.cos(high), np.sin(high)], [np.cos(low), np.sin(low)]], np.float32)
    gold = np.array([1.0, 0.0], np.float32)
    assert float(cosent_loss(u, v, gold)) == pytest.approx(np.log1p(np.exp(20.0 * (0.75 - 0.95))), rel=1e-4)
    assert float(cosent_loss(u, v, gold)) < 0.02 < float(cosine_mse_loss(u, v, gold))
    assert float(cosent_loss(u, v, gold[::-1].copy())) > 4.0
    assert float(cosent_loss(u, v, np.array([0.5, 0.5], np.float32))) == pytest.approx(0.0, abs=1e-6)
