"""Translation retrieval: Tatoeba-style accuracy, P@k in a large pool, documents."""

import numpy as np

from tf_msemb.evaluation import search


def translation_accuracy(src_embeddings, tgt_embeddings):
    """Nearest neighbour by cosine in the other language, both directions.

    Row i of each array is the i-th sentence of an aligned pair (unit vectors).
    Returns accuracies `src->tgt`, `tgt->src` and their `mean`, in [0, 1].
    """
    if src_embeddings.shape != tgt_embeddings.shape:
        raise ValueError(
            f"Aligned sets must have equal shapes, got {src_embeddings.shape} and {tgt_embeddings.shape}."
        )
    similarity = src_embeddings @ tgt_embeddings.T
    gold = np.arange(len(similarity))
    forward = float(np.mean(np.argmax(similarity, axis=1) == gold))
    backward = float(np.mean(np.argmax(similarity, axis=0) == gold))
    return {"src->tgt": forward, "tgt->src": backward, "mean": (forward + backward) / 2}


def precision_at_k(queries, pool, gold, ks=(1, 3, 10), index="exact", **search_options):
    """P@k of finding each query's true translation in a large pool (UN-style).

    `gold[i]` is the pool row of query i's translation. The pool is searched
    with `search.knn` (`index` exact or approximate). Returns `{"P@k": fraction}`.
    """
    gold = np.asarray(gold)
    _, ids = search.knn(queries, pool, max(ks), index, **search_options)
    hits = ids == gold[:, None]
    return {f"P@{k}": float(np.mean(np.any(hits[:, :k], axis=1))) for k in ks}


def document_embeddings(doc_ids, sentence_embeddings):
    """Mean of each document's sentence embeddings, renormalized to unit length.

    Returns `(ids in order of first appearance, [n_docs, d] array)`.
    """
    position = {}
    for doc in doc_ids:
        position.setdefault(doc, len(position))
    sums = np.zeros((len(position), sentence_embeddings.shape[1]), np.float64)
    np.add.at(sums, [position[doc] for doc in doc_ids], sentence_embeddings)
    means = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    return list(position), means.astype(np.float32)
