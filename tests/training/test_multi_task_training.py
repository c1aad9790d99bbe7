"""A two-task run through `train`: each task reads its own input, logs its own metrics, and a run interrupted
and started again ends where an uninterrupted one does (both tasks' input positions, the task draws, dropout)."""

import functools
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.pipeline import make_distributed_dataset
from tf_msemb.export.model_card import METADATA_FILE
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.ema_teacher_distillation import EMATeacherDistillation
from tf_msemb.objectives.multi_task import MultiTask
from tf_msemb.objectives.multi_task import Task
from tf_msemb.objectives.translation_ranking import TranslationRanking
from tf_msemb.training import trainer

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, dropout=0.1)


def _objective(records, mode, sampling):
    data = functools.partial(make_distributed_dataset, corpora=[records], max_tokens=48)
    tasks = [Task("rank", TranslationRanking, dataset_fn=data, weight=0.5, matryoshka_widths=(16, 8)),
             Task("ema", functools.partial(EMATeacherDistillation, tau_base=0.9, schedule="constant"),
                  dataset_fn=functools.partial(data, pair_weights={"en-de": 1.0}), global_batch_size=4)]
    return functools.partial(MultiTask, tasks=tasks, mode=mode, sampling=sampling)


def _train(model_dir, tokenizer, records, num_steps=6, mode="alternating", sampling="proportional"):
    return trainer.train(str(model_dir), objective=_objective(records, mode, sampling), tokenizer=tokenizer,
                         encoder=functools.partial(SentenceEncoder, **TINY), global_batch_size=8,
                         num_steps=num_steps, log_every=2, checkpoint_every=3, seed=5)


def _final_state(model_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")))
    return {name: reader.get_tensor(name) for name, dtype in reader.get_variable_to_dtype_map().items()
            if dtype not in (tf.variant, tf.string)}


@pytest.mark.slow
def test_interrupted_two_task_run_resumes_exactly(tokenizer, quickstart_records, tmp_path, monkeypatch):
    """Interrupted after step 3's checkpoint (tasks drawn in proportion to their batches), started again: every
    saved tensor (weights, both tasks' state, optimizer) equals the uninterrupted run's."""
    _train(tmp_path / "whole", tokenizer, quickstart_records)
    make_step = trainer._make_step_function

    def failing_after_three(*args):
        step = make_step(*args)

        def interrupted(k):
            if k == 3:
                raise KeyboardInterrupt
            return step(k)

        return interrupted

    monkeypatch.setattr(trainer, "_make_step_function", failing_after_three)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "resumed", tokenizer, quickstart_records)
    monkeypatch.undo()
    _train(tmp_path / "resumed", tokenizer, quickstart_records)
    whole, resumed = _final_state(tmp_path / "whole"), _final_state(tmp_path / "resumed")
    assert sorted(whole) == sorted(resumed)
    assert any("teacher" in name for name in whole)
    for name, value in whole.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_summed_run_logs_every_task_and_exports_the_student(tokenizer, quickstart_records, tmp_path, capsys):
    """Both tasks train each step: their losses fall apart in the log's metrics, and the export is the student."""
    result = _train(tmp_path / "run", tokenizer, quickstart_records, num_steps=4, mode="summed")
    out = capsys.readouterr().out
    assert "rank/loss" in out and "ema/tau" in out
    with open(tmp_path / "run" / "export" / "final" / METADATA_FILE, encoding="utf-8") as f:
        objective = json.load(f)["objective"]
    assert objective["class"] == "MultiTask" and objective["mode"] == "summed"
    assert [(t["name"], t["objective"], t["weight"], t["matryoshka"]) for t in objective["tasks"]] == [
        ("rank", "TranslationRanking", 0.5, {"widths": [16, 8], "weights": [1.0, 1.0]}),
        ("ema", "EMATeacherDistillation", 1.0, None)]
    assert result["steps"] == 4


@pytest.mark.parametrize("in_task", [True, False])
def test_xla_refuses_a_gradient_cached_task_naming_its_binding(tokenizer, quickstart_records, tmp_path, in_task):
    """`train.jit_compile` with gradient caching fails before training, naming the binding that set it: the task's
    own (`<task>/Task.gradient_cache_chunk`) in a multi-task run, `train.gradient_cache_chunk` for one objective."""
    data = functools.partial(make_distributed_dataset, corpora=[quickstart_records], max_tokens=48)
    objective = (functools.partial(MultiTask, tasks=[Task("rank", TranslationRanking, dataset_fn=data),
                                                     Task("cached", TranslationRanking, dataset_fn=data,
                                                          gradient_cache_chunk=2)])
                 if in_task else TranslationRanking)
    binding = "cached/Task.gradient_cache_chunk = 2" if in_task else "train.gradient_cache_chunk = 2"
    with pytest.raises(ValueError, match=f"^{binding} runs its chunks .*; unset train.jit_compile"):
        trainer.train(str(tmp_path), objective=objective, tokenizer=tokenizer, dataset_fn=data,
                      encoder=functools.partial(SentenceEncoder, **TINY), global_batch_size=8, num_steps=2,
                      jit_compile=True, gradient_cache_chunk=None if in_task else 2)
