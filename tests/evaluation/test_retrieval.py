import numpy as np
import pytest

from tf_msemb.evaluation.retrieval import translation_accuracy


def test_accuracy_by_hand():
    src = np.eye(3, dtype=np.float32)
    # tgt 0 and 1 both sit closest to src 0; tgt 2 is right.
    tgt = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]], np.float32)
    result = translation_accuracy(src, tgt)
    # src->tgt: src0->tgt0 ok, src1->tgt1 ok (0.6), src2->tgt2 ok => 1.0
    # tgt->src: tgt0->src0 ok, tgt1->src0 wrong, tgt2->src2 ok => 2/3
    assert result["src->tgt"] == 1.0
    assert result["tgt->src"] == pytest.approx(2 / 3)
    assert result["mean"] == pytest.approx(5 / 6)


def test_shape_mismatch():
    with pytest.raises(ValueError, match="equal shapes"):
        translation_accuracy(np.zeros((3, 2)), np.zeros((2, 2)))
