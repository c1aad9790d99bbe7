import numpy as np
import pytest

from tf_msemb.evaluation.retrieval import document_embeddings
from tf_msemb.evaluation.retrieval import precision_at_k
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


def test_precision_at_k_by_hand():
    # Pool on the unit circle at angles 0, 10, 20, 30, 40 degrees; queries at 0 and 21 degrees.
    angles = np.radians([0, 10, 20, 30, 40])
    pool = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    queries = np.stack([np.cos(np.radians([0, 21])), np.sin(np.radians([0, 21]))], axis=1).astype(np.float32)
    # Query 0's translation is row 0 (rank 1); query 1's is row 4 (ranks: 20, 30, 10, 40 -> rank 4).
    result = precision_at_k(queries, pool, gold=[0, 4], ks=(1, 3, 5))
    assert result == {"P@1": 0.5, "P@3": 0.5, "P@5": 1.0}
    approximate = precision_at_k(queries, pool, gold=[0, 4], ks=(1, 3, 5), index="hnsw")
    assert approximate == result


def test_document_embeddings_are_normalized_means_in_first_seen_order():
    sentences = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], np.float32)
    ids, docs = document_embeddings(["b", "a", "b", "b"], sentences)
    assert ids == ["b", "a"]
    np.testing.assert_allclose(docs[0], np.array([2, 1]) / np.sqrt(5), rtol=1e-6)
    np.testing.assert_allclose(docs[1], [0, 1])
