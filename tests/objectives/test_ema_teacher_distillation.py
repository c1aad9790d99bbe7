import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.ema_teacher_distillation import EMATeacherDistillation
from tf_msemb.objectives.ema_teacher_distillation import byol_tau

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
    expected = np.mean(np.sum((model.encoder(batch["tgt"]).numpy() - target) ** 2, axis=1))
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
