import functools
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.objectives.base import RunFacts
from tf_msemb.objectives.ema_teacher_distillation import EMATeacherDistillation
from tf_msemb.objectives.ema_teacher_distillation import byol_tau
from tf_msemb.objectives.ema_teacher_distillation import rescaled_tau_base
from tf_msemb.training.trainer import build_objective

TINY = dict(hidden_dim=8, num_layers=1, num_heads=2, intermediate_dim=16, max_sequence_length=8, dropout=0.0)


def _batch(rng, batch=4, length=6, vocabulary_size=30):
    def side():
        ids = rng.integers(4, vocabulary_size, size=(batch, length)).astype(np.int32)
        mask = np.arange(length)[None, :] < rng.integers(2, length + 1, size=batch)[:, None]
        return {"token_ids": np.where(mask, ids, 0).astype(np.int32), "padding_mask": mask}

    return {"src": side(), "tgt": side()}


def _model(**kwargs):
    keras.utils.set_random_seed(0)
    model = EMATeacherDistillation(SentenceEncoder(30, **TINY), total_steps=10, **kwargs)
    model.build()
    model.compile(optimizer=keras.optimizers.SGD(0.5))
    model.optimizer.build(model.trainable_variables)
    return model


def test_byol_schedule():
    assert float(byol_tau(0, 100, 0.99)) == pytest.approx(0.99)
    assert float(byol_tau(50, 100, 0.99)) == pytest.approx(0.995)
    assert float(byol_tau(100, 100, 0.99)) == pytest.approx(1.0)


def test_teacher_starts_as_a_copy_and_only_the_student_trains():
    model = _model()
    for t, s in zip(model.teacher.get_weights(), model.encoder.get_weights()):
        np.testing.assert_array_equal(t, s)
    assert len(model.trainable_variables) == len(model.encoder.trainable_variables)
    batch = _batch(np.random.default_rng(0))
    target = model.teacher(batch["src"]).numpy()
    expected = np.mean((model.encoder(batch["tgt"]).numpy() - target) ** 2)  # Eq. 1: the element mean
    assert float(model.train_step(batch)["loss"]) == pytest.approx(expected, rel=1e-5)


def test_frozen_teacher_never_moves():
    model = _model(frozen=True)
    before = model.teacher.get_weights()
    step = tf.function(model.train_step)
    for _ in range(3):
        step(_batch(np.random.default_rng(1)))
    for a, b in zip(before, model.teacher.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(before, model.encoder.get_weights()))


def test_ema_under_mirrored_strategy_matches_numpy(two_device_strategy):
    """Both replicas' teacher copies equal a NumPy EMA of the student's weights."""
    with two_device_strategy.scope():
        model = _model(tau_base=0.7, schedule="constant")
    rng = np.random.default_rng(2)
    expected = [w.astype(np.float64) for w in model.teacher.get_weights()]
    float_mask = [w.dtype.kind == "f" for w in expected]

    @tf.function
    def step(data):
        return two_device_strategy.run(model.train_step, args=(data,))

    for _ in range(3):
        batch = _batch(rng, batch=8)
        data = two_device_strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.nest.map_structure(lambda t: t[4 * ctx.replica_id_in_sync_group:][:4], batch)
        )
        step(data)
        student = model.encoder.get_weights()
        expected = [0.7 * e + 0.3 * s if f else e for e, s, f in zip(expected, student, float_mask)]
    for variable, want in zip(model.teacher.weights, expected):
        assert variable.value.aggregation == tf.VariableAggregation.ONLY_FIRST_REPLICA
        copies = two_device_strategy.experimental_local_results(variable.value)
        assert len(copies) == 2
        for copy in copies:
            np.testing.assert_allclose(copy.numpy(), want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(model.teacher.get_weights()[0], model.encoder.get_weights()[0])


def test_tau_inside_train_step_follows_the_cosine_schedule_at_the_step_taken():
    """At optimizer step k the update uses tau_k (not tau_{k+1}, not tau_base): teacher = tau_k xi + (1 - tau_k) theta."""
    model = _model(tau_base=0.5)
    model.optimizer.iterations.assign(3)
    teacher_before = model.teacher.get_weights()
    logs = model.train_step(_batch(np.random.default_rng(3)))
    tau = 1.0 - 0.5 * (np.cos(np.pi * 3 / 10) + 1.0) / 2.0  # 0.603; tau_4 would be 0.673
    assert float(logs["tau"]) == pytest.approx(tau, rel=1e-6)
    for after, before, student in zip(model.teacher.get_weights(), teacher_before, model.encoder.get_weights()):
        np.testing.assert_allclose(after, tau * before + (1.0 - tau) * student, rtol=1e-5, atol=1e-6)
    assert not np.allclose(model.teacher.get_weights()[0], teacher_before[0])


def test_tau_base_is_rescaled_to_the_run_length():
    """The paper's 0.99999 at K = 105K moves the teacher as far in 600 steps as 0.99825 does."""
    assert rescaled_tau_base(0.99999, 105_000, 600) == pytest.approx(0.99825)
    model = EMATeacherDistillation(SentenceEncoder(30, **TINY), total_steps=600, tau_base=0.99999,
                                   tau_reference_steps=105_000)
    assert model.tau_base == pytest.approx(0.99825)
    travel = sum(1.0 - float(model.tau(k)) for k in range(600))
    assert travel == pytest.approx(0.525, rel=0.01)
    assert model.options["tau_base"] == 0.99999  # the config keeps what the user wrote
    with pytest.raises(ValueError, match="no equivalent for a run of 10 steps"):
        EMATeacherDistillation(SentenceEncoder(30, **TINY), total_steps=10, tau_base=0.999, tau_reference_steps=105_000)


def test_no_gradient_reaches_the_teacher():
    model = _model()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([w.value for w in model.teacher.weights])
        loss = model.distillation_loss(_batch(np.random.default_rng(4)))
    teacher_grads = tape.gradient(loss, [w.value for w in model.teacher.weights])
    assert all(g is None or not np.any(tf.convert_to_tensor(g).numpy()) for g in teacher_grads)
    student_grads = tape.gradient(loss, model.encoder.trainable_variables)
    assert all(g is not None for g in student_grads)


def test_element_mean_is_the_sum_over_the_width():
    batch = _batch(np.random.default_rng(5))
    summed = float(_model(mse="sum").distillation_loss(batch, training=False))
    mean = float(_model().distillation_loss(batch, training=False))  # the paper's, the default
    assert mean == pytest.approx(summed / 8, rel=1e-5)


def test_teacher_starts_from_the_stage_one_weights(tmp_path):
    """Initialized from a stage-1 run, the teacher equals those weights, not the fresh encoder's."""
    keras.utils.set_random_seed(7)
    stage1 = ensure_built(SentenceEncoder(30, **TINY))
    path = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=stage1)).save(str(tmp_path / "stage1" / "ckpt"))
    tokenizer = types.SimpleNamespace(vocabulary_size=30, max_length=8)
    model, _ = build_objective(EMATeacherDistillation, RunFacts(tokenizer, 10, 4), functools.partial(SentenceEncoder, **TINY),
                               None, path, str(tmp_path / "stage2"), "float32")
    for teacher, student, want in zip(model.teacher.get_weights(), model.encoder.get_weights(), stage1.get_weights()):
        np.testing.assert_array_equal(teacher, want)
        np.testing.assert_array_equal(student, want)
