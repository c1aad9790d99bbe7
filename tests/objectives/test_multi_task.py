"""`MultiTask`: the summed step is the weighted sum of each task's gradient, an alternating step is one task's
own step, tasks draw by step, replicas agree, gin builds scoped tasks."""

import dataclasses
import functools
import json
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from objectives.replica_check import assert_two_replicas_match_one
from objectives.replica_check import random_tokens
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.base import RunFacts
from tf_msemb.objectives.ema_teacher_distillation import EMATeacherDistillation
from tf_msemb.objectives.multi_task import MultiTask
from tf_msemb.objectives.multi_task import Task
from tf_msemb.objectives.multi_task import task_batches_per_epoch
from tf_msemb.objectives.multilingual_distillation import MultilingualDistillation
from tf_msemb.objectives.translation_ranking import TranslationRanking

VOCABULARY = 40
TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=16, max_sequence_length=8, dropout=0.0)
TASKS = [Task("rank", functools.partial(TranslationRanking, scale=5.0), weight=0.3),
         Task("distill", functools.partial(MultilingualDistillation, teacher_dim=12), weight=2.0)]


def _batches(batch_size=6, seed=0):
    rng = np.random.default_rng(seed)
    rank = {"src": random_tokens(rng, (batch_size, 7), VOCABULARY), "tgt": random_tokens(rng, (batch_size, 7), VOCABULARY)}
    distill = {"src": random_tokens(rng, (batch_size, 5), VOCABULARY),
               "tgt": random_tokens(rng, (batch_size, 6), VOCABULARY),
               "teacher": rng.normal(size=(batch_size, 12)).astype(np.float32)}
    return {"rank": rank, "distill": distill}


def _compiled(model, optimizer=None):
    model.build()
    model.compile(optimizer=optimizer or keras.optimizers.SGD(1.0))
    model.optimizer.build(model.trainable_variables)
    return model


def _multi_task(tasks=TASKS, optimizer=None, **options):
    keras.utils.set_random_seed(1)
    encoder = SentenceEncoder(VOCABULARY, **TINY)
    return _compiled(MultiTask(encoder, tasks=tasks, run=RunFacts(total_steps=10, global_batch_size=6), **options),
                     optimizer)


def _own_step_change(model, index, data):
    """What task `index`'s objective alone, from `model`'s current weights, changes with SGD(1): `-grad L_t`."""
    task_objective = model.objectives[index]
    alone = _compiled(model.tasks[index].objective(encoder=SentenceEncoder(VOCABULARY, **TINY),
                                                   run=task_objective.run))
    alone.set_weights(task_objective.get_weights())
    before = [w.copy() for w in alone.get_weights()]
    alone.train_step(data)
    return [after - start for after, start in zip(alone.get_weights(), before)]


def _change(objective, before):
    return [after - start for after, start in zip(objective.get_weights(), before)]


def test_summed_step_applies_the_weighted_sum_of_each_tasks_gradient():
    """Each task's gradient at the same weights, times its weight, summed per variable (the student's weights
    get both, the projection head only distillation's). Stepping the tasks one after another, or unweighted,
    gives other weights."""
    model = _multi_task()
    data = _batches()
    rank_change = _own_step_change(model, 0, data["rank"])
    distill_change = _own_step_change(model, 1, data["distill"])
    encoder_weights = len(model.encoder.get_weights())
    before = [o.get_weights() for o in model.objectives]
    logs = model.train_step(data)
    changed_rank, changed_distill = (_change(o, b) for o, b in zip(model.objectives, before))
    for got, rank, distill in zip(changed_rank, rank_change, distill_change[:encoder_weights]):
        np.testing.assert_allclose(got, 0.3 * rank + 2.0 * distill, atol=2e-6)
    for got, distill in zip(changed_distill[encoder_weights:], distill_change[encoder_weights:]):
        np.testing.assert_allclose(got, 2.0 * distill, atol=2e-6)
    assert max(np.abs(d).max() for d in distill_change[encoder_weights:]) > 1e-3
    assert float(logs["loss"]) == pytest.approx(0.3 * float(logs["rank/loss"]) + 2.0 * float(logs["distill/loss"]))
    assert {"rank/accuracy", "distill/mse_src", "distill/mse_tgt"} <= set(logs)


def test_a_gradient_of_a_variable_the_optimizer_does_not_update_is_an_error():
    """The sum is applied to the multi-task model's variables; a task's gradient of any other would vanish."""
    from tf_msemb.objectives.base import GradientSum

    kept, stray = keras.Variable([1.0, 2.0], name="kept"), keras.Variable([3.0], name="stray")
    gradient_sum = GradientSum()
    gradient_sum.add([tf.constant([0.5, 0.5]), tf.constant([1.0])], [kept, stray])
    assert gradient_sum.gradients_and_variables([kept, stray])[1] == [kept, stray]
    with pytest.raises(ValueError, match="stray"):
        gradient_sum.gradients_and_variables([kept])


def test_summed_gradient_is_clipped_as_one():
    """`global_clipnorm` clips the summed gradient, as a one-objective step of `sum w_t L_t` would: the change
    is the sum's direction at the clip norm (clipping each task apart points elsewhere)."""
    data = _batches()
    free = _multi_task()
    before = [o.get_weights() for o in free.objectives]
    free.train_step(data)
    direction = np.concatenate([c.ravel() for c in _change(free.objectives[1], before[1])])
    clipped = _multi_task(optimizer=keras.optimizers.SGD(1.0, global_clipnorm=0.01))
    before = [o.get_weights() for o in clipped.objectives]
    clipped.train_step(data)
    change = np.concatenate([c.ravel() for c in _change(clipped.objectives[1], before[1])])
    assert np.linalg.norm(direction) > 0.1
    assert np.linalg.norm(change) == pytest.approx(0.01, rel=1e-4)
    np.testing.assert_allclose(change, direction * 0.01 / np.linalg.norm(direction), atol=1e-7)


def test_alternating_steps_are_each_tasks_own_step_weighted():
    """Round-robin: step 0 is the first task's own step times its weight, step 1 the second's from there."""
    model = _multi_task(mode="alternating")
    data = _batches()
    assert [model.step_key(k) for k in range(5)] == [0, 1, 0, 1, 0]
    for index, name, weight in [(0, "rank", 0.3), (1, "distill", 2.0)]:
        own = _own_step_change(model, index, data[name])
        before = model.objectives[index].get_weights()
        model.task_step(index, data[name])
        for got, expected in zip(_change(model.objectives[index], before), own):
            np.testing.assert_allclose(got, weight * expected, atol=2e-6)


def test_momentum_copies_follow_the_summed_step_not_the_weights_before_it():
    """An EMA teacher task updates after the summed gradient is applied: `xi = tau xi + (1 - tau) theta_new`.
    Updated before it, the teacher (a copy of the start) would not move."""
    tasks = [Task("ema", functools.partial(EMATeacherDistillation, tau_base=0.5, schedule="constant")),
             Task("rank", functools.partial(TranslationRanking, scale=5.0), weight=0.5)]
    model = _multi_task(tasks)
    ema = model.objectives[0]
    start = [w.numpy().copy() for w in ema.teacher.weights]
    data = _batches()
    model.train_step({"ema": data["rank"], "rank": data["distill"]})
    student = [w.numpy() for w in model.encoder.weights]
    for teacher, first, now in zip(ema.teacher.weights, start, student):
        np.testing.assert_allclose(teacher.numpy(), 0.5 * first + 0.5 * now, atol=1e-6)
    assert max(np.abs(now - first).max() for first, now in zip(start, student)) > 1e-3


def test_proportional_sampling_follows_batches_per_epoch_and_the_step_alone(quickstart_records):
    """Each task's chance is its share of batches per epoch (examples / its batch), drawn from the seed and step
    alone: the same key for the same step, whatever came before."""

    class Input:
        corpora = [quickstart_records]

    batches = task_batches_per_epoch(Input, 8)
    assert batches == pytest.approx(1050 / 8)
    model = _multi_task(mode="alternating", sampling="proportional")
    model._probabilities = np.array([0.8, 0.2])
    keys = [model.step_key(k) for k in range(4000)]
    assert np.mean(np.array(keys) == 0) == pytest.approx(0.8, abs=0.03)
    assert [model.step_key(k) for k in (3999, 17, 5)] == [keys[3999], keys[17], keys[5]]

    class Glob:
        corpora = [quickstart_records.replace("qs.manifest.json", "qs.*.tfrecord-*")]

    with pytest.raises(ValueError, match="no manifest"):
        task_batches_per_epoch(Glob, 8)


@pytest.mark.slow
def test_two_replicas_equal_one_replica_with_the_full_batches(two_device_strategy):
    """Both tasks' batches split over two replicas: the ranking task's negatives gathered across them, the sum
    applied once."""
    def make_model():
        return _multi_task(optimizer=keras.optimizers.SGD(0.05))  # SGD(1) diverges here

    assert_two_replicas_match_one(make_model, _batches(batch_size=8), two_device_strategy, steps=2)


def test_options_describe_every_task_and_a_run_level_gradient_cache_is_refused():
    model = _multi_task()
    options = model.options
    assert options["mode"] == "summed" and [t["name"] for t in options["tasks"]] == ["rank", "distill"]
    assert options["tasks"][1] == {"name": "distill", "objective": "MultilingualDistillation", "weight": 2.0,
                                   "global_batch_size": 6, "gradient_cache_chunk": None, "matryoshka": None,
                                   "options": model.objectives[1].options}
    assert model.exports() == {"encoder": (None, model.encoder)}
    with pytest.raises(ValueError, match="Task.gradient_cache_chunk"):
        MultiTask(SentenceEncoder(VOCABULARY, **TINY), tasks=TASKS, run=RunFacts(gradient_cache_chunk=2))
    with pytest.raises(ValueError, match="unique names"):
        MultiTask(SentenceEncoder(VOCABULARY, **TINY), tasks=[TASKS[0], TASKS[0]])


def test_gin_builds_each_task_in_its_own_scope(clean_gin, tokenizer, quickstart_records):
    """A task's objective and data read their scope's bindings; each task's run facts carry its batch, and its
    input its corpora, batch and features."""
    import gin

    import tf_msemb.configurables  # noqa: F401

    gin.parse_config(f"""
        MultiTask.tasks = [@distill/Task(), @rank/Task()]
        distill/Task.name = 'distill'
        distill/Task.objective = @distill/MultilingualDistillation
        distill/MultilingualDistillation.teacher_dim = 12
        rank/Task.name = 'rank'
        rank/Task.objective = @rank/TranslationRanking
        rank/Task.weight = 0.5
        rank/Task.global_batch_size = 4
        rank/Task.dataset_fn = @rank/make_distributed_dataset
        rank/make_dataset.corpora = ['{quickstart_records}']
        rank/make_dataset.max_tokens = 48
        rank/TranslationRanking.scale = 7.0
        TranslationRanking.scale = 2.0
    """)
    model = MultiTask(SentenceEncoder(VOCABULARY, **TINY), run=RunFacts(global_batch_size=6))
    distill, rank = model.objectives
    assert distill.teacher_dim == 12 and distill.options["teacher_dim"] == 12
    assert rank.scale == 7.0 and rank.options["scale"] == 7.0 and rank.run.global_batch_size == 4
    assert distill.run.global_batch_size == 6 and model.tasks[1].weight == 0.5
    assert distill.encoder.encoder is model.encoder and rank.encoder is model.encoder
    seen = []

    def run_dataset_fn(strategy, global_batch_size, features, **kwargs):
        seen.append((global_batch_size, [type(f).__name__ for f in features], sorted(kwargs)))
        return types.SimpleNamespace(iterators=[], source_files=[], corpora=["teacher.manifest.json"],
                                     checkpointable=True)

    inputs = model.make_input(run_dataset_fn, tf.distribute.get_strategy(), 6, tokenizer=tokenizer, seed=0)
    # The distill task takes the run's dataset_fn, the rank task its own.
    assert seen == [(6, ["TeacherVectors"], ["seed", "tokenizer"])]
    assert inputs.tasks["rank"].corpora == [quickstart_records] and len(inputs.iterators) == 1
    assert inputs.corpora == ["teacher.manifest.json", quickstart_records]
    assert next(inputs.tasks["rank"].iterators[0])["src"]["token_ids"].shape[0] == 4


def test_a_gradient_cached_task_hands_its_gradient_to_the_clipped_weighted_sum():
    """A task stepped in chunks (`Task.gradient_cache_chunk`) gives the summed step the same weighted gradient as
    its plain step: the clipped change equals the uncached run's. A cached step that applied its own update (or an
    unweighted one) outside the clipped sum would move the weights elsewhere."""
    cached_tasks = [dataclasses.replace(TASKS[0], gradient_cache_chunk=2), TASKS[1]]
    data = _batches()
    runs = {}
    for name, tasks in (("plain", TASKS), ("cached", cached_tasks)):
        model = _multi_task(tasks, optimizer=keras.optimizers.SGD(1.0, global_clipnorm=0.01))
        before = [w.copy() for w in model.get_weights()]
        logs = model.train_step(data)
        runs[name] = ([after - start for after, start in zip(model.get_weights(), before)], float(logs["loss"]))
    assert runs["cached"][1] == pytest.approx(runs["plain"][1], rel=1e-5)
    plain, cached = runs["plain"][0], runs["cached"][0]
    assert np.sqrt(sum((c ** 2).sum() for c in plain)) == pytest.approx(0.01, rel=1e-3)  # the clip bound
    for got, want in zip(cached, plain):
        np.testing.assert_allclose(got, want, atol=1e-7)
    assert model.objectives[0].run.gradient_cache_chunk == 2


def _manifest(directory, name, examples):
    """A manifest of `examples` pairs in one (empty) shard: what `task_batches_per_epoch` counts."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}-00000").write_bytes(b"")
    path = directory / f"{name}.manifest.json"
    path.write_text(json.dumps({"prefix": name, "pairs": {"en-de": {"files": [f"{name}-00000"],
                                                                     "examples": examples}}}))
    return str(path)


def test_make_input_draws_tasks_in_proportion_to_their_batches_per_epoch(tmp_path):
    """Rank: 600 pairs in batches of 6 (100 batches); distill: 100 pairs in batches of 2 (50): chances 2/3 and
    1/3, computed by make_input itself. Uniform chances, or chances from pairs instead of batches (6/7), fail."""
    corpora = {"rank": _manifest(tmp_path / "rank", "rank", 600), "distill": _manifest(tmp_path / "distill", "distill",
                                                                                        100)}
    tasks = [dataclasses.replace(TASKS[0], dataset_fn=functools.partial(_fake_input, corpora["rank"])),
             dataclasses.replace(TASKS[1], dataset_fn=functools.partial(_fake_input, corpora["distill"]),
                                 global_batch_size=2)]
    model = _multi_task(tasks, mode="alternating", sampling="proportional")
    with pytest.raises(ValueError, match="call make_input first"):
        model.step_key(0)
    inputs = model.make_input(None, None, 6)
    assert set(inputs.tasks) == {"rank", "distill"} and inputs.corpora == [corpora["rank"], corpora["distill"]]
    keys = np.array([model.step_key(k) for k in range(6000)])
    assert np.mean(keys == 0) == pytest.approx(2 / 3, abs=0.02)


def _fake_input(corpus, strategy, global_batch_size, features=(), **kwargs):
    """A task's input as `make_distributed_dataset` describes it: its corpora (nothing is read)."""
    return types.SimpleNamespace(corpora=[corpus], iterators=[], source_files=[], batch=global_batch_size)
