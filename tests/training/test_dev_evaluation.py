"""Evaluation during training: figures equal to the export's, the best step kept, resume remembers it."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from conftest import corpus_file
from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.retrieval import translation_accuracy
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.text_files import read_lines
from tf_msemb.training.dev_evaluation import DevEvaluation
from tf_msemb.training.trainer import train
from tf_msemb.objectives.translation_ranking import TranslationRanking
from tf_msemb.data.pipeline import make_distributed_dataset


class HeldoutRetrieval(Evaluator):
    """Tatoeba-style accuracy on the quickstart corpus' held-out en-de pairs (a real dev metric)."""

    name = "heldout"

    def __init__(self, count=110):
        self.src = read_lines(corpus_file("heldout", "en"))[:count]
        self.tgt = read_lines(corpus_file("heldout", "de"))[:count]

    def evaluate(self, embed):
        return {"en-de": translation_accuracy(embed(self.src), embed(self.tgt)) | {"size": len(self.src)}}


def test_selection_follows_the_mode_and_counts_stale_evaluations():
    dev = DevEvaluation([], best_metric="m/x", mode="min", patience=2)
    assert dev.record(10, {"m/x": 0.5}) and dev.selection == {"metric": "m/x", "mode": "min", "value": 0.5, "step": 10}
    assert not dev.record(20, {"m/x": 0.7}) and not dev.exhausted
    assert dev.record(30, {"m/x": 0.4}) and int(dev.stale.numpy()) == 0
    assert not dev.record(40, {"m/x": 0.4})  # equal is no improvement
    assert not dev.record(50, {"m/x": 0.9}) and dev.exhausted
    assert dev.selection["step"] == 30
    with pytest.raises(ValueError, match=r"'m/y' is not among the dev metrics: m/x"):
        DevEvaluation([], best_metric="m/y").record(1, {"m/x": 1.0})
    with pytest.raises(ValueError, match="needs train.best_metric"):
        DevEvaluation([], patience=3)


def test_a_resumed_selection_remembers_the_best(tmp_path):
    dev = DevEvaluation([], best_metric="m/x")
    dev.record(10, {"m/x": 0.8})
    path = dev.state().write(str(tmp_path / "ckpt"))
    resumed = DevEvaluation([], best_metric="m/x")
    resumed.state().read(path).assert_consumed()
    assert not resumed.record(20, {"m/x": 0.7})  # a fresh selection would take 0.7 as the best
    assert resumed.selection["step"] == 10 and math.isclose(resumed.selection["value"], 0.8)


def _train(model_dir, tokenizer, quickstart_records, **options):
    def encoder(vocabulary_size, max_sequence_length):
        return SentenceEncoder(vocabulary_size, max_sequence_length=max_sequence_length, hidden_dim=32,
                               num_layers=1, num_heads=2, intermediate_dim=64)

    return train(str(model_dir), objective=TranslationRanking, tokenizer=tokenizer, encoder=encoder,
                 global_batch_size=16, log_every=100,
                 dataset_fn=lambda *args, **kwargs: make_distributed_dataset(
                     *args, corpora=[quickstart_records], max_tokens=48, **kwargs),
                 **{"checkpoint_every": 1000} | options)


def _results(model_dir):
    return [json.loads(line) for line in (model_dir / "eval_results.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_dev_figures_equal_the_exports_and_the_best_step_is_kept(tmp_path, tokenizer, quickstart_records):
    model_dir = tmp_path / "run"
    evaluator = HeldoutRetrieval()
    _train(model_dir, tokenizer, quickstart_records, num_steps=30, eval_every=10, export_every=10,
           evaluators=[evaluator], best_metric="heldout/mean")
    rows = _results(model_dir)
    assert [row["step"] for row in rows] == [10, 20, 30]
    for row in rows:
        export = tf.saved_model.load(str(model_dir / "export" / str(row["step"])))
        from_export = evaluator(lambda sentences: export(tf.constant(sentences)).numpy())
        assert set(from_export) == set(row) - {"step"}
        for name, value in from_export.items():
            assert row[name] == pytest.approx(value, abs=1e-4), name
    best = max(rows, key=lambda row: row["heldout/mean"])
    metadata = json.loads((model_dir / "export" / "best" / "tf_msemb_export.json").read_text())
    assert metadata["selection"] == {"metric": "heldout/mean", "mode": "max", "value": best["heldout/mean"],
                                     "step": best["step"]}
    sentences = tf.constant(["Die Frau liest ein Buch.", "A dog runs."])
    kept = tf.saved_model.load(str(model_dir / "export" / "best"))(sentences).numpy()
    versioned = tf.saved_model.load(str(model_dir / "export" / str(best["step"])))(sentences).numpy()
    np.testing.assert_allclose(kept, versioned, atol=1e-6)
    assert tf.train.load_checkpoint(str(model_dir / "best" / "ckpt")).get_tensor(
        "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == best["step"]


class ScriptedMetric(Evaluator):
    """A dev metric that takes `values` in turn (after encoding a sentence), so a run's peak is known in advance:
    a real metric's peak moves with the rounding of every update."""

    name = "scripted"

    def __init__(self, values):
        self.values = iter(values)

    def evaluate(self, embed):
        embed(["A dog runs."])
        return {"set": {"score": next(self.values), "size": 1}}


@pytest.mark.slow
def test_the_peak_is_kept_across_a_resume_and_early_stopping_ends_the_run(tmp_path, tokenizer, quickstart_records):
    model_dir = tmp_path / "run"
    options = dict(eval_every=10, best_metric="scripted/score", patience=5)
    # The peak at step 20; the first run ends after two stale evaluations (steps 30 and 40).
    _train(model_dir, tokenizer, quickstart_records, num_steps=40, export_every=10,
           evaluators=[ScriptedMetric([0.3, 0.6, 0.5, 0.4])], **options)
    first = _results(model_dir)
    # Remembering those two, the fifth stale evaluation (step 70) ends the resumed run; a resume that forgot
    # them would run on to step 80 and select its 0.9.
    _train(model_dir, tokenizer, quickstart_records, num_steps=80,
           evaluators=[ScriptedMetric([0.5, 0.2, 0.55, 0.9])], **options)
    rows = _results(model_dir)
    assert rows[: len(first)] == first
    assert [row["step"] for row in rows] == [10, 20, 30, 40, 50, 60, 70]
    stop = 70
    metadata = json.loads((model_dir / "export" / "best" / "tf_msemb_export.json").read_text())
    assert metadata["selection"]["step"] == 20 and metadata["training_step"] == 20
    # Exported at the end of the first run from best/ckpt: the peak's weights, not the last step's.
    sentences = tf.constant(["Die Frau liest ein Buch.", "A dog runs."])
    load = lambda name: tf.saved_model.load(str(model_dir / "export" / name))(sentences).numpy()  # noqa: E731
    kept = load("best")
    np.testing.assert_allclose(kept, load("20"), atol=1e-6)
    assert np.abs(kept - load("40")).max() > 1e-3
    assert json.loads((model_dir / "export" / "final" / "tf_msemb_export.json").read_text())["training_step"] == stop


class Interrupted(Exception):
    """The run's process ending in the middle of an evaluation."""


class ScriptedThenInterrupted(ScriptedMetric):
    """`ScriptedMetric` whose evaluation after the last value ends the run."""

    def evaluate(self, embed):
        try:
            return super().evaluate(embed)
        except StopIteration:
            raise Interrupted() from None


@pytest.mark.slow
def test_a_checkpoint_on_an_evaluation_step_keeps_that_evaluation(tmp_path, tokenizer, quickstart_records):
    model_dir = tmp_path / "run"
    options = dict(num_steps=40, eval_every=20, best_metric="scripted/score")
    # Step 20 is evaluated (the peak, 0.9) and checkpointed; the run ends during step 40's evaluation, so it
    # resumes from ckpt-20. A checkpoint written before step 20's evaluation would resume without it and take
    # step 40's 0.5 as the best.
    with pytest.raises(Interrupted):
        _train(model_dir, tokenizer, quickstart_records, evaluators=[ScriptedThenInterrupted([0.9])],
               checkpoint_every=20, **options)
    assert sorted(path.name for path in (model_dir / "checkpoints").glob("ckpt-*.index")) == ["ckpt-20.index"]
    _train(model_dir, tokenizer, quickstart_records, evaluators=[ScriptedMetric([0.5])], checkpoint_every=20,
           **options)
    assert [row["step"] for row in _results(model_dir)] == [20, 40]
    metadata = json.loads((model_dir / "export" / "best" / "tf_msemb_export.json").read_text())
    assert metadata["selection"]["step"] == 20 and metadata["training_step"] == 20
