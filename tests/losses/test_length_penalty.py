import numpy as np
import pytest

from tf_msemb.losses.length_penalty import embedding_length_penalty


def test_weighted_mean_norm_by_hand():
    e = np.array([[3.0, 4.0], [0.0, 1.0]], np.float32)
    assert float(embedding_length_penalty(e, 0.5)) == pytest.approx(0.5 * (5.0 + 1.0) / 2)
    assert float(embedding_length_penalty(e, 0.0)) == 0.0
