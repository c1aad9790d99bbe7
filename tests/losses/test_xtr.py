import numpy as np
import pytest

from tf_msemb.losses.xtr import bag_of_tokens
from tf_msemb.losses.xtr import bidirectional_xtr_loss
from tf_msemb.losses.xtr import xtr_kl


def test_bag_of_tokens_counts_real_tokens_only():
    # Row 0: <s>=2, tokens 5 5 7, </s>=3, padding 0. Row 1: only specials -> zeros.
    ids = np.array([[2, 5, 5, 7, 3, 0], [2, 3, 0, 0, 0, 0]])
    mask = ids != 0
    bag = np.asarray(bag_of_tokens(ids, mask, vocabulary_size=8, ignore_ids=(2, 3)))
    expected = np.zeros((2, 8))
    expected[0, 5], expected[0, 7] = 2 / 3, 1 / 3
    np.testing.assert_allclose(bag, expected, rtol=1e-6)


def _numpy_bag(ids, mask, vocabulary_size, ignore_ids):
    bag = np.zeros((len(ids), vocabulary_size))
    for row, (row_ids, row_mask) in enumerate(zip(ids, mask)):
        tokens = [t for t, real in zip(row_ids, row_mask) if real and t not in ignore_ids]
        for token in tokens:
            bag[row, token] += 1.0 / len(tokens)
    return bag


def test_bag_of_tokens_matches_numpy_with_repeats_padding_specials_and_unk():
    # Layout of our SentencePiece models: <pad>=0 <unk>=1 <s>=2 </s>=3; <unk> is counted, the others are not.
    rng = np.random.default_rng(0)
    ids = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8], size=(6, 10), p=[0.1, 0.15, 0.1, 0.1, 0.25, 0.1, 0.1, 0.05, 0.05])
    lengths = np.array([10, 7, 3, 1, 0, 5])
    mask = np.arange(10) < lengths[:, None]
    ids[1, 7:] = 5  # padded positions hold a real token id: the mask, not the id, says they are padding
    ids[5, :5] = [2, 1, 1, 4, 3]
    bag = np.asarray(bag_of_tokens(ids.astype(np.int32), mask, vocabulary_size=12, ignore_ids=(0, 2, 3)))
    expected = _numpy_bag(ids, mask, 12, (0, 2, 3))
    np.testing.assert_allclose(bag, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bag[5], np.eye(12)[[1, 1, 4]].mean(axis=0), rtol=1e-6)
    assert expected[:, 1].sum() > 0 and (np.abs(expected.sum(axis=1) - 1) < 1e-9).sum() >= 4
    assert bag[4].sum() == 0.0


def test_kl_matches_numpy_with_zero_target_entries():
    rng = np.random.default_rng(0)
    p = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.25, 0.75, 0.0]])
    logits = rng.normal(size=(2, 4))
    log_q = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = np.mean([sum(pi * (np.log(pi) - lq) for pi, lq in zip(row, lrow) if pi > 0)
                        for row, lrow in zip(p, log_q)])
    assert float(xtr_kl(p.astype(np.float32), logits.astype(np.float32))) == pytest.approx(expected, rel=1e-5)
    # A head that predicts the bag exactly pays nothing.
    assert float(xtr_kl(p[:1], np.log([[0.5, 0.5, 1e-12, 1e-12]]))) == pytest.approx(0.0, abs=1e-6)


def test_bidirectional_scores_each_side_against_the_other_bag():
    rng = np.random.default_rng(1)
    bag_src = np.array([[1.0, 0.0, 0.0]], np.float32)
    bag_tgt = np.array([[0.0, 0.5, 0.5]], np.float32)
    logits_src, logits_tgt = rng.normal(size=(2, 1, 3)).astype(np.float32)
    got = float(bidirectional_xtr_loss(bag_src, bag_tgt, logits_src, logits_tgt))
    assert got == pytest.approx(float(xtr_kl(bag_tgt, logits_src)) + float(xtr_kl(bag_src, logits_tgt)))
    swapped = float(xtr_kl(bag_src, logits_src)) + float(xtr_kl(bag_tgt, logits_tgt))
    assert got != pytest.approx(swapped)
