"""MTEB tasks whose data are local rows instead of a Hugging Face Hub download, and the scores MTEB gives.

MTEB (the Massive Text Embedding Benchmark) loads every task's data set from
the Hub. `LocalSTS` and `LocalBitextMining` are MTEB task classes (its
`AbsTaskSTS` and `AbsTaskBitextMining`, so MTEB scores them with its own
evaluators and writes its own results files) built from sentences already in
memory (`local_sts`, `local_bitext_mining`): an STS benchmark file, a
Tatoeba pair, any line-aligned files.

A task is also a JSON-able spec (`task_spec` / `task_from_spec`), so another
process (the sentence-transformers side of `evaluation.mteb.peer`) rebuilds
exactly the same task. This module imports mteb and datasets, never
TensorFlow.
"""

import datasets
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.abstasks.text.bitext_mining import AbsTaskBitextMining

LOCAL_REVISION = "local"


def _metadata(name, kind, description, split, languages, main_score):
    return TaskMetadata(name=name, dataset={"path": f"local/{name}", "revision": LOCAL_REVISION},
                        description=description, type=kind, category="t2t", modalities=["text"],
                        eval_splits=[split], eval_langs=languages, main_score=main_score, license="not specified")


class _LocalRows:
    """Rows given at construction instead of `load_dataset` (a mixin before MTEB's task class).

    MTEB reads a task's `metadata` from its class (unloading data drops an
    instance's own), so each local task is an instance of a subclass made
    for it by `_task`.
    """

    subset = "default"

    def __init__(self, rows, split):
        self.rows, self.split = rows, split
        super().__init__()

    def load_data(self, num_proc=None, **kwargs):
        del num_proc, kwargs
        if self.data_loaded:
            return
        self.dataset = {self.subset: datasets.DatasetDict({self.split: datasets.Dataset.from_dict(self.rows)})}
        self.data_loaded = True


class LocalSTS(_LocalRows, AbsTaskSTS):
    """An STS task (gold 0-5); main score cosine Spearman, as MTEB's STS tasks. Made by `local_sts`."""

    min_score, max_score = 0, 5


class LocalBitextMining(_LocalRows, AbsTaskBitextMining):
    """Bitext mining as MTEB scores Tatoeba; main score F1 (weighted over the sources). Made by
    `local_bitext_mining`."""


def _task(base, metadata, rows, split, **attributes):
    return type(base.__name__, (base,), {"metadata": metadata, **attributes})(rows, split)


def local_sts(name, sentences1, sentences2, scores, languages=("eng",), split="validation",
              description="Local STS pairs"):
    """The STS task of `sentences1[i]`, `sentences2[i]`, gold `scores[i]`.

    `languages` are ISO 639-3 codes (with an optional script, `eng-Latn`);
    a cross-lingual set names both (`["eng", "deu"]`).
    """
    if not len(sentences1) == len(sentences2) == len(scores):
        raise ValueError(f"{name}: {len(sentences1)} first sentences, {len(sentences2)} second and "
                         f"{len(scores)} scores.")
    rows = {"sentence1": list(sentences1), "sentence2": list(sentences2), "score": [float(s) for s in scores]}
    return _task(LocalSTS, _metadata(name, "STS", description, split, list(languages), "cosine_spearman"), rows,
                 split)


def local_bitext_mining(name, sources, targets, languages, split="test", description="Local line-aligned bitext"):
    """The bitext-mining task where each `sources[i]` finds its nearest of all `targets`, gold `targets[i]`.

    `languages` are the two sides' ISO 639-3 codes; the subset is named
    `src-tgt` after them (`deu-eng`).
    """
    if len(sources) != len(targets):
        raise ValueError(f"{name}: {len(sources)} source sentences but {len(targets)} targets.")
    subset = "-".join(code.split("-")[0] for code in languages)
    metadata = _metadata(name, "BitextMining", description, split, {subset: list(languages)}, "f1")
    return _task(LocalBitextMining, metadata, {"sentence1": list(sources), "sentence2": list(targets)}, split,
                 subset=subset)


def task_spec(task):
    """A local task as JSON-able data, for `task_from_spec` in another process."""
    metadata = task.metadata
    common = {"name": metadata.name, "split": task.split, "description": metadata.description}
    if isinstance(task, LocalSTS):
        return {"kind": "sts", **common, "sentences1": task.rows["sentence1"], "sentences2": task.rows["sentence2"],
                "scores": task.rows["score"], "languages": metadata.eval_langs}
    return {"kind": "bitext", **common, "sources": task.rows["sentence1"], "targets": task.rows["sentence2"],
            "languages": metadata.eval_langs[task.subset]}


def task_from_spec(spec):
    """The task `task_spec` described."""
    common = {"split": spec["split"], "description": spec["description"], "languages": spec["languages"]}
    if spec["kind"] == "sts":
        return local_sts(spec["name"], spec["sentences1"], spec["sentences2"], spec["scores"], **common)
    return local_bitext_mining(spec["name"], spec["sources"], spec["targets"], **common)


def main_scores(model_result):
    """`{(task, subset, split): main score x100}` of an MTEB `ModelResult`."""
    scores = {}
    for task_result in model_result.task_results:
        for split, rows in task_result.scores.items():
            for row in rows:
                scores[(task_result.task_name, row["hf_subset"], split)] = 100.0 * float(row["main_score"])
    return scores
