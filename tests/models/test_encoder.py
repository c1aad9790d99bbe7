import numpy as np
import pytest

from tf_msemb.models.encoder import SentenceEncoder

TINY = dict(vocabulary_size=10, hidden_dim=8, num_layers=2, num_heads=2, intermediate_dim=16, max_sequence_length=6)


def _tokens(ids, lengths):
    ids = np.array(ids, np.int32)
    mask = np.arange(ids.shape[1])[None, :] < np.array(lengths)[:, None]
    return {"token_ids": ids, "padding_mask": mask}


@pytest.mark.parametrize("pooling", ["mean", "max", "first", "attention", ["max", "mean", "first", "attention"]])
def test_output_shape_and_padding_invariance(pooling):
    encoder = SentenceEncoder(**TINY, pooling=pooling, pooled_dim=5, dropout=0.0)
    short = encoder(_tokens([[2, 5, 6, 3]], [4])).numpy()
    padded = encoder(_tokens([[2, 5, 6, 3, 0, 0], [2, 7, 3, 0, 0, 0]], [4, 3])).numpy()
    assert padded.shape == (2, encoder.output_dim) == (2, 8 if isinstance(pooling, str) else 5)
    np.testing.assert_allclose(padded[0], short[0], atol=1e-5)


def test_normalize_gives_unit_vectors():
    encoder = SentenceEncoder(**TINY, normalize=True)
    out = encoder(_tokens([[2, 5, 3], [2, 9, 3]], [3, 3])).numpy()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_dropout_only_in_training():
    encoder = SentenceEncoder(**TINY, dropout=0.5)
    tokens = _tokens([[2, 5, 6, 3]], [4])
    np.testing.assert_array_equal(encoder(tokens), encoder(tokens))
    assert not np.allclose(encoder(tokens, training=True), encoder(tokens, training=True))


def test_config_round_trip_rebuilds_the_same_architecture():
    encoder = SentenceEncoder(**TINY, pooling=["max", "first"], pooled_dim=4, normalize=True)
    encoder(_tokens([[2, 3]], [2]))
    clone = SentenceEncoder.from_config(encoder.get_config())
    clone(_tokens([[2, 3]], [2]))
    assert [v.shape for v in clone.weights] == [v.shape for v in encoder.weights]
    assert clone.get_config() == encoder.get_config()


def test_bad_head_count():
    with pytest.raises(ValueError, match="divisible"):
        SentenceEncoder(**{**TINY, "num_heads": 3})
