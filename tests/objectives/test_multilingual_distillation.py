import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.teacher_vectors import add_teacher_vectors
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.objectives import multilingual_distillation as md
from tf_msemb.data.features import TeacherVectors

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, max_sequence_length=48, dropout=0.0)


@pytest.fixture(scope="module")
def teacher(tokenizer):
    keras.utils.set_random_seed(7)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, **{**TINY, "hidden_dim": 12}, normalize=True)
    encoder(tokenizer(tf.constant(["x"])))
    return tokenizer, encoder


def _compile(model, lr=3e-3):
    model.build()
    model.compile(optimizer=keras.optimizers.Adam(lr))
    model.optimizer.build(model.trainable_variables)
    return model


def _train(model, dataset, steps):
    step = tf.function(model.train_step, reduce_retracing=True)
    data = iter(dataset)
    return [float(step(next(data))["loss"]) for _ in range(steps)]


def test_precomputed_teacher_with_projection(tokenizer, teacher, quickstart_records, tmp_path):
    add_teacher_vectors(quickstart_records, *teacher, "tiny", str(tmp_path / "t"), verbose=False)
    student = SentenceEncoder(tokenizer.vocabulary_size, **TINY)
    model = _compile(md.MultilingualDistillation(student, teacher_dim=12))
    assert isinstance(model.encoder, ProjectedEncoder) and [(type(f), f.dim) for f in model.input_features] == [(TeacherVectors, 12)]
    dataset = make_dataset([str(tmp_path / "t" / "qs.manifest.json")], tokenizer, 16, max_tokens=48, features=model.input_features)
    losses = _train(model, dataset, 60)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])
    assert model.encoder(tokenizer(tf.constant(["Hallo"]))).shape == (1, 12)


def test_live_teacher_stays_frozen_and_matches_precomputed_loss(tokenizer, teacher, quickstart_records, monkeypatch):
    monkeypatch.setattr(md, "load_teacher", lambda name, prompt=None: teacher)
    student = SentenceEncoder(tokenizer.vocabulary_size, **{**TINY, "hidden_dim": 12})
    model = _compile(md.MultilingualDistillation(student, teacher="tiny"))
    assert model.teacher_dim == 12 and model.encoder is student
    assert not model.teacher.trainable_variables and len(model.trainable_variables) == len(student.trainable_variables)
    before = [w.numpy().copy() for w in teacher[1].weights]
    dataset = make_dataset([quickstart_records], tokenizer, 8, max_tokens=48, features=model.input_features)
    batch = next(iter(dataset))
    # The live teacher sees its own tokens of `src`; here they equal the student's.
    np.testing.assert_array_equal(batch["teacher_src"]["token_ids"], batch["src"]["token_ids"])
    expected_target = teacher[1](batch["src"]).numpy()
    s, t = student(batch["src"]).numpy(), student(batch["tgt"]).numpy()
    expected = np.mean(np.sum((expected_target - s) ** 2, 1)) + np.mean(np.sum((expected_target - t) ** 2, 1))
    logs = model.train_step(batch)
    assert float(logs["loss"]) == pytest.approx(expected, rel=1e-4)
    _train(model, dataset, 5)
    for w, w0 in zip(teacher[1].weights, before):
        np.testing.assert_array_equal(w.numpy(), w0)


def test_width_mismatch_can_be_refused(tokenizer):
    student = SentenceEncoder(tokenizer.vocabulary_size, **TINY)
    with pytest.raises(ValueError, match=r"Student width 16 differs from teacher width 384"):
        md.MultilingualDistillation(student, teacher_dim=384, projection="error")
    with pytest.raises(ValueError, match="needs a live `teacher`"):
        md.MultilingualDistillation(student)


def _ranked(vocabulary_size, ranking_weight, optimizer=None, queue=0, negatives=0, sources=False):
    keras.utils.set_random_seed(3)
    student = SentenceEncoder(vocabulary_size, **{**TINY, "hidden_dim": 8, "dropout": 0.0})
    model = md.MultilingualDistillation(student, teacher_dim=8, ranking_weight=ranking_weight, ranking_margin=0.3,
                                        ranking_queue_size=queue, ranking_hard_negatives=negatives,
                                        ranking_sources=sources)
    return _compile(model) if optimizer is None else _compile_with(model, optimizer)


def _compile_with(model, optimizer):
    model.build()
    model.compile(optimizer=optimizer)
    model.optimizer.build(model.trainable_variables)
    return model


def _ranked_batch(rng, vocabulary_size, size=6, negatives=0):
    from objectives.replica_check import random_tokens

    teacher = rng.normal(size=(size, 8)).astype(np.float32)
    teacher[3] = teacher[0]  # one English source paired with two languages in the batch
    batch = {"src": random_tokens(rng, (size, 7), vocabulary_size),
             "tgt": random_tokens(rng, (size, 7), vocabulary_size), "teacher": teacher}
    if negatives:
        batch["teacher_negatives"] = rng.normal(size=(size, negatives, 8)).astype(np.float32)
        batch["teacher_negatives"][1, 0] = teacher[2]  # one pair's negative is another pair's source
    return batch


def test_teacher_ranking_is_added_on_the_translations_against_the_batchs_teacher_vectors(tokenizer):
    model = _ranked(tokenizer.vocabulary_size, ranking_weight=0.5)
    batch = _ranked_batch(np.random.default_rng(4), tokenizer.vocabulary_size)
    s, t = model.encoder(batch["src"]).numpy(), model.encoder(batch["tgt"]).numpy()
    teacher = batch["teacher"]
    mse = np.mean(np.sum((teacher - s) ** 2, 1)) + np.mean(np.sum((teacher - t) ** 2, 1))
    q = t / np.linalg.norm(t, axis=1, keepdims=True)
    ranking = _numpy_ranking(q, teacher)
    logs = model.train_step(batch)
    assert float(logs["ranking"]) == pytest.approx(ranking, rel=1e-4)
    assert float(logs["loss"]) == pytest.approx(mse + 0.5 * ranking, rel=1e-4)
    # Ranked against the student's own English vectors instead, the figure would differ.
    own = s / np.linalg.norm(s, axis=1, keepdims=True)
    assert float(logs["ranking"]) != pytest.approx(
        np.mean([np.log(np.sum(np.exp(20.0 * (q[i] @ own.T) - 6.0 * np.eye(len(q))[i]))) - 20.0 * (q[i] @ own[i] - 0.3)
                 for i in range(len(q))]), rel=1e-2)


def test_ranked_sources_rank_their_own_teacher_vectors_among_the_same_candidates(tokenizer):
    model = _ranked(tokenizer.vocabulary_size, ranking_weight=0.5, optimizer=keras.optimizers.SGD(0.0), sources=True,
                    negatives=2)
    batch = _ranked_batch(np.random.default_rng(4), tokenizer.vocabulary_size, negatives=2)
    s, t = model.encoder(batch["src"]).numpy(), model.encoder(batch["tgt"]).numpy()
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)
    teacher = batch["teacher"]
    candidates = np.concatenate([teacher, batch["teacher_negatives"].reshape(-1, 8)])
    # Each of the 2b queries (translations, then sources) ranks its pair's teacher vector among the batch's teacher
    # vectors and every pair's negatives; the loss is their mean.
    expected = (_numpy_ranking(unit(t), candidates) + _numpy_ranking(unit(s), candidates)) / 2
    logs = model.train_step(batch)
    assert float(logs["ranking"]) == pytest.approx(expected, rel=1e-4)
    # Translations alone, sources ranked against the student's own source vectors, or sources ranked without the
    # negatives give other figures.
    wrong = [_numpy_ranking(unit(t), candidates),
             (_numpy_ranking(unit(t), candidates) + _numpy_ranking(unit(s), s)) / 2,
             (_numpy_ranking(unit(t), candidates) + _numpy_ranking(unit(s), teacher)) / 2]
    for figure in wrong:
        assert float(logs["ranking"]) != pytest.approx(figure, rel=1e-2)


def test_ranked_sources_without_ranking_are_refused(tokenizer):
    with pytest.raises(ValueError, match="ranking_sources = True needs a ranking_weight > 0: it only adds queries"):
        md.MultilingualDistillation(SentenceEncoder(tokenizer.vocabulary_size, **TINY), teacher_dim=16,
                                    ranking_sources=True)


def _numpy_ranking(queries, candidates):
    """Seed 004's AMS (scale 20, margin 0.3) of unit `queries` against `candidates` (query i's positive: row i),
    a candidate equal to the positive left out."""
    c = candidates / np.linalg.norm(candidates, axis=1, keepdims=True)
    losses = []
    for i in range(len(queries)):
        logits = 20.0 * (queries[i] @ c.T)
        logits[i] -= 20.0 * 0.3
        kept = [j for j in range(len(c)) if j == i or not np.allclose(c[j], c[i])]
        losses.append(np.log(np.sum(np.exp(logits[kept]))) - logits[i])
    return np.mean(losses)


def test_the_queue_adds_earlier_batches_teacher_vectors_as_candidates(tokenizer):
    model = _ranked(tokenizer.vocabulary_size, ranking_weight=0.5, optimizer=keras.optimizers.SGD(0.0), queue=10)
    rng = np.random.default_rng(6)
    first, second = _ranked_batch(rng, tokenizer.vocabulary_size), _ranked_batch(rng, tokenizer.vocabulary_size)
    second["teacher"][5] = first["teacher"][2]  # a source seen one batch ago is the same target, not a negative
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)
    # An empty queue adds nothing (its unfilled slots are left out).
    logs = model.train_step(first)
    assert float(logs["ranking"]) == pytest.approx(
        _numpy_ranking(unit(model.encoder(first["tgt"]).numpy()), first["teacher"]), rel=1e-4)
    assert int(model.queue_filled.numpy()) == 6
    model.reset_metrics()  # the step reports running means
    logs = model.train_step(second)
    q = unit(model.encoder(second["tgt"]).numpy())
    expected = _numpy_ranking(q, np.concatenate([second["teacher"], first["teacher"]]))
    assert float(logs["ranking"]) == pytest.approx(expected, rel=1e-4)
    assert float(logs["ranking"]) != pytest.approx(_numpy_ranking(q, second["teacher"]), rel=1e-3)
    # FIFO: 10 slots hold the second batch and the last four rows of the first.
    assert int(model.queue_filled.numpy()) == 10 and int(model.queue_pointer.numpy()) == 2
    np.testing.assert_allclose(model.ranking_queue.numpy()[:2], second["teacher"][4:])
    np.testing.assert_allclose(model.ranking_queue.numpy()[6:], second["teacher"][:4])


def test_teacher_negatives_join_every_translations_candidates(tokenizer):
    model = _ranked(tokenizer.vocabulary_size, ranking_weight=0.5, optimizer=keras.optimizers.SGD(0.0), negatives=2)
    assert [(type(f).__name__, getattr(f, "count", None)) for f in model.input_features] == [
        ("TeacherVectors", None), ("TeacherNegatives", 2)]
    batch = _ranked_batch(np.random.default_rng(8), tokenizer.vocabulary_size, negatives=2)
    t = model.encoder(batch["tgt"]).numpy()
    q = t / np.linalg.norm(t, axis=1, keepdims=True)
    negatives = batch["teacher_negatives"].reshape(-1, 8)
    logs = model.train_step(batch)
    # Every pair's negatives are candidates of every translation; pair 1's negative equal to pair 2's source is
    # the same target for translation 2, left out there.
    assert float(logs["ranking"]) == pytest.approx(_numpy_ranking(q, np.concatenate([batch["teacher"], negatives])),
                                                   rel=1e-4)
    assert float(logs["ranking"]) != pytest.approx(_numpy_ranking(q, batch["teacher"]), rel=1e-3)
    own = np.mean([_numpy_ranking(q[i : i + 1], np.concatenate([batch["teacher"][[i]], batch["teacher"][:i],
                                                                 batch["teacher"][i + 1 :],
                                                                 batch["teacher_negatives"][i]]))
                   for i in range(len(q))])
    assert float(logs["ranking"]) != pytest.approx(own, rel=1e-3)  # not each pair's own negatives alone


def test_teacher_negatives_need_ranking_and_stored_vectors(tokenizer, teacher, monkeypatch):
    with pytest.raises(ValueError, match="ranking_hard_negatives = 2 needs a ranking_weight"):
        md.MultilingualDistillation(SentenceEncoder(tokenizer.vocabulary_size, **TINY), teacher_dim=16,
                                    ranking_hard_negatives=2)
    monkeypatch.setattr(md, "load_teacher", lambda name, prompt=None: teacher)
    with pytest.raises(ValueError, match="reads precomputed teacher negatives"):
        md.MultilingualDistillation(SentenceEncoder(tokenizer.vocabulary_size, **{**TINY, "hidden_dim": 12}),
                                    teacher="tiny", ranking_weight=0.1, ranking_hard_negatives=2)


def test_a_queue_without_ranking_is_refused(tokenizer):
    with pytest.raises(ValueError, match="ranking_queue_size = 8 needs a ranking_weight > 0: it only adds candidates"):
        md.MultilingualDistillation(SentenceEncoder(tokenizer.vocabulary_size, **TINY), teacher_dim=16,
                                    ranking_queue_size=8)


def test_without_ranking_the_step_is_seed_001s(tokenizer):
    model = _ranked(tokenizer.vocabulary_size, ranking_weight=0.0)
    logs = model.train_step(_ranked_batch(np.random.default_rng(4), tokenizer.vocabulary_size))
    assert sorted(logs) == ["loss", "mse_src", "mse_tgt"]


@pytest.mark.slow
def test_teacher_ranking_on_two_replicas_equals_one_replica_with_the_full_batch(tokenizer, two_device_strategy):
    from objectives.replica_check import assert_two_replicas_match_one

    batch = _ranked_batch(np.random.default_rng(5), tokenizer.vocabulary_size, size=8, negatives=2)
    batch["teacher"][5] = batch["teacher"][1]  # a duplicate across the two replicas' halves
    batch["teacher_negatives"][6, 1] = batch["teacher"][0]  # a negative on one replica, a source on the other
    assert_two_replicas_match_one(
        lambda: _ranked(tokenizer.vocabulary_size, 1.0, keras.optimizers.SGD(0.1), queue=12, negatives=2), batch,
        two_device_strategy, steps=2)
