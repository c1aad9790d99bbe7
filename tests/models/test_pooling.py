import numpy as np
import pytest

from tf_msemb.models.pooling import AttentionPooling
from tf_msemb.models.pooling import ConcatPooling
from tf_msemb.models.pooling import FirstTokenPooling
from tf_msemb.models.pooling import MaskedMaxPooling
from tf_msemb.models.pooling import MaskedMeanPooling
from tf_msemb.models.pooling import MultiPooling
from tf_msemb.models.pooling import make_pooling

HIDDEN = np.array(
    [[[1.0, 2.0], [3.0, -4.0], [100.0, 100.0]], [[-1.0, 0.0], [7.0, 7.0], [5.0, 9.0]]], np.float32
)
MASK = np.array([[True, True, False], [True, True, True]])


def test_mean_ignores_padding():
    np.testing.assert_allclose(MaskedMeanPooling()(HIDDEN, MASK), [[2.0, -1.0], [11 / 3, 16 / 3]], rtol=1e-6)


def test_max_ignores_padding():
    np.testing.assert_allclose(MaskedMaxPooling()(HIDDEN, MASK), [[3.0, 2.0], [7.0, 9.0]])


def test_first_token():
    np.testing.assert_allclose(FirstTokenPooling()(HIDDEN, MASK), [[1.0, 2.0], [-1.0, 0.0]])


def test_attention_weights_are_a_masked_softmax():
    layer = AttentionPooling()
    layer.build(HIDDEN.shape)
    layer.query.assign(np.array([0.5, -0.25], np.float32))
    scores = HIDDEN @ np.array([0.5, -0.25])
    scores[~MASK] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(layer(HIDDEN, MASK), np.einsum("bl,bld->bd", weights, HIDDEN), rtol=1e-5)


def test_multi_pooling_concatenates_then_projects():
    layer = MultiPooling(["max", "mean"], output_dim=3)
    out = layer(HIDDEN, MASK)
    assert out.shape == (2, 3)
    kernel, bias = layer.projection.kernel.numpy(), layer.projection.bias.numpy()
    concat = np.concatenate([[[3.0, 2.0], [7.0, 9.0]], [[2.0, -1.0], [11 / 3, 16 / 3]]], axis=1)
    np.testing.assert_allclose(out, concat @ kernel + bias, rtol=1e-5)
    assert MultiPooling.from_config(layer.get_config()).poolings == ("max", "mean")


def test_factory_errors():
    with pytest.raises(ValueError, match="Unknown pooling"):
        make_pooling("median")
    with pytest.raises(ValueError, match="pooled_dim"):
        make_pooling(["max", "mean"])


def test_mean_sqrt_len_divides_the_sum_by_the_root_of_the_count():
    np.testing.assert_allclose(make_pooling("mean_sqrt_len")(HIDDEN, MASK),
                               [[4.0 / np.sqrt(2), -2.0 / np.sqrt(2)], [11 / np.sqrt(3), 16 / np.sqrt(3)]], rtol=1e-6)


def test_plus_joined_poolings_concatenate_in_the_order_given_without_projection():
    layer = make_pooling("first+max")
    assert isinstance(layer, ConcatPooling) and not layer.weights
    np.testing.assert_allclose(layer(HIDDEN, MASK), [[1.0, 2.0, 3.0, 2.0], [-1.0, 0.0, 7.0, 9.0]])
    assert ConcatPooling.from_config(layer.get_config()).poolings == ("first", "max")
