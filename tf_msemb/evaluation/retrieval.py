"""Translation retrieval: Tatoeba-style accuracy, P@k in a large pool, documents."""


import gin
import numpy as np

from tf_msemb.evaluation import search
from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.evaluator import named_files
from tf_msemb.evaluation.evaluator import path_list
from tf_msemb.evaluation.mining import read_id_sentences
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines

PAIR = ("source", "target")  # the files of a pair, as `file_tuples` checks them


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


def read_aligned(src_path, tgt_path):
    """`(source lines, target lines)` of two line-aligned files (line i translates line i)."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}.")
    return src, tgt


def aligned_sets(pairs, binding):
    """`{set name: (source lines, target lines)}` of `(source, target)` file pairs (`evaluator.named_files`)."""
    return {name: read_aligned(*pair) for name, pair in named_files(pairs, PAIR, binding)}


@gin.configurable(module="tf_msemb.evaluation")
class TranslationRetrieval(Evaluator):
    """Tatoeba-style accuracy (LASER's Tatoeba sets; seed 001, Sec. 4.3): nearest neighbour by cosine, both ways.

    Args:
        pairs: `(source file, target file)` pairs of line-aligned text (plain or .gz).
        name: the metric prefix.

    One row per pair, `"<source file> / <target file>"`, with accuracies
    `src->tgt`, `tgt->src` and their `mean` in [0, 1]; `<name>/mean` averages the pairs.
    """

    def __init__(self, pairs, name="retrieval"):
        self.name = name
        self.sets = aligned_sets(pairs, "TranslationRetrieval.pairs")

    def evaluate(self, embed):
        return {name: translation_accuracy(embed(src), embed(tgt)) | {"size": len(src)}
                for name, (src, tgt) in self.sets.items()}


@gin.configurable(module="tf_msemb.evaluation")
class PoolRetrieval(Evaluator):
    """P@1/3/10 of finding each source line's translation among all target lines (UN-style large pools).

    Args:
        pairs: `(source file, target file)` pairs of line-aligned text.
        distractors: files whose lines join every pool as extra targets.
        index: the search (`search.INDEXES`: exact, flat, or approximate ivf, ivfpq, hnsw).
        nprobe: cells visited per query by the ivf indexes.
        name: the metric prefix.

    One row per pair, `"<source file> / <target file> (pool <n>)"`, with `P@1`, `P@3`, `P@10`.
    """

    def __init__(self, pairs, distractors=(), index="exact", nprobe=16, name="pool"):
        self.name, self.index, self.nprobe = name, search.checked_index(index), nprobe
        self.distractors = [line for path in path_list(distractors) for line in read_lines(path)]
        self.sets = {}
        for name, (src, tgt) in aligned_sets(pairs, "PoolRetrieval.pairs").items():
            self.sets[f"{name} (pool {len(tgt) + len(self.distractors)})"] = (src, tgt)

    def evaluate(self, embed):
        extra = embed(self.distractors) if self.distractors else None
        results = {}
        for name, (src, tgt) in self.sets.items():
            pool = embed(tgt)
            if extra is not None:
                pool = np.concatenate([pool, extra])
            scores = precision_at_k(embed(src), pool, np.arange(len(src)), index=self.index, nprobe=self.nprobe)
            results[name] = scores | {"size": len(src)}
        return results


@gin.configurable(module="tf_msemb.evaluation")
class DocumentRetrieval(Evaluator):
    """P@1/3/10 of source documents finding the target document with the same id.

    A document is the mean of its sentence embeddings, renormalized (`document_embeddings`).

    Args:
        pairs: `(source file, target file)` pairs of `doc_id<TAB>sentence` files; every source
            document must be in the target file.
        index: the search (`search.INDEXES`).
        nprobe: cells visited per query by the ivf indexes.
        name: the metric prefix.

    One row per pair, `"documents <source file> / <target file>"`, sized in source documents.
    """

    def __init__(self, pairs, index="exact", nprobe=16, name="documents"):
        self.name, self.index, self.nprobe = name, search.checked_index(index), nprobe
        self.sets = {}
        for name, (src_path, tgt_path) in named_files(pairs, PAIR, "DocumentRetrieval.pairs"):
            src, tgt = read_id_sentences(src_path), read_id_sentences(tgt_path)
            row = {doc: i for i, doc in enumerate(dict.fromkeys(tgt[0]))}
            src_docs = list(dict.fromkeys(src[0]))  # the order of `document_embeddings`
            missing = [doc for doc in src_docs if doc not in row]
            if missing:
                raise CorpusError(f"{tgt_path} lacks documents {missing[:5]} of {src_path}.")
            gold = [row[doc] for doc in src_docs]
            self.sets[f"documents {name}"] = (src, tgt, gold)

    def evaluate(self, embed):
        results = {}
        for name, ((src_ids, src), (tgt_ids, tgt), gold) in self.sets.items():
            _, src_docs = document_embeddings(src_ids, embed(src))
            _, tgt_docs = document_embeddings(tgt_ids, embed(tgt))
            scores = precision_at_k(src_docs, tgt_docs, gold, index=self.index, nprobe=self.nprobe)
            results[name] = scores | {"size": len(gold)}
        return results
