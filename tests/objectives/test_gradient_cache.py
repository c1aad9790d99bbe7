"""Gradient caching (`objectives.gradient_cache`): the cached step's gradient is the full-batch one.

Gradients are read where the step hands them to the optimizer
(`Objective.apply_gradients`), for every trainable variable: the encoder's
(reached only through the cached embedding gradients) and the heads' (EMS'
XTR and contrastive MLP, reached in the loss pass).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from objectives.replica_check import assert_two_replicas_match_one
from objectives.replica_check import random_tokens
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives import gradient_cache
from tf_msemb.objectives.base import RunFacts
from tf_msemb.objectives.bidirectional_dual_encoder import BidirectionalDualEncoder
from tf_msemb.objectives.dual_momentum_contrast import DualMomentumContrast
from tf_msemb.objectives.ems import EMS
from tf_msemb.objectives.multilingual_distillation import MultilingualDistillation
from tf_msemb.objectives.translation_ranking import TranslationRanking

TINY = dict(hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32, max_sequence_length=48)
VOCABULARY = 50
BATCH = 16
CHUNK = 4

# Each objective whose loss couples the batch, with its in-batch parts switched on: margins, hard negatives,
# EMS' XTR head and contrastive MLP, MoCo's in-batch negatives beside a queue.
OBJECTIVES = {
    "translation_ranking": (TranslationRanking, dict(margin=0.2)),
    "bide_ams_hard_negatives": (BidirectionalDualEncoder, dict(scale=10.0, margin=0.3, num_hard_negatives=2,
                                                               scoring="cosine")),
    "bide_dot_length_penalty": (BidirectionalDualEncoder, dict(margin=0.3, num_hard_negatives=2, scoring="dot",
                                                               length_penalty=0.1)),
    "ems": (EMS, dict(language_dim=6, contrastive_dim=8)),
    # L_emb is the encoder's token embedding: a weight reached by the loss pass and by the towers.
    "ems_shared_output_embedding": (EMS, dict(language_dim=6, contrastive_dim=8, share_output_embedding=True)),
    "moco_in_batch": (DualMomentumContrast, dict(queue_size=12, in_batch_negatives=True, temperature=0.1)),
    # Towers on two encoders: each accumulates into its own weights only.
    "moco_separate_encoders": (DualMomentumContrast, dict(queue_size=12, in_batch_negatives=True, temperature=0.1,
                                                                separate_encoders=True)),
}


# The default run checks two setups that cover a loss pass reaching encoder weights, hard negatives and margins;
# `make test-all` checks every objective (each case traces a 2-layer model twice: about 15 s).
DEFAULT_RUN = ("bide_ams_hard_negatives", "ems_shared_output_embedding")
EACH_OBJECTIVE = [name if name in DEFAULT_RUN else pytest.param(name, marks=pytest.mark.slow) for name in OBJECTIVES]


def _model(name, chunk=None, dropout=0.0, seed=0, optimizer=None):
    cls, options = OBJECTIVES[name]
    keras.utils.set_random_seed(seed)
    encoder = SentenceEncoder(VOCABULARY, dropout=dropout, pooling=["max", "mean", "first", "attention"],
                              pooled_dim=12, **TINY)
    model = cls(encoder, run=RunFacts(seed=seed, gradient_cache_chunk=chunk), **options)
    model.build()
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.0))
    model.optimizer.build(model.trainable_variables)
    return model


def _batch(seed=1, batch=BATCH):
    rng = np.random.default_rng(seed)
    data = {"src": random_tokens(rng, (batch, 9), VOCABULARY), "tgt": random_tokens(rng, (batch, 7), VOCABULARY),
            "hard_negatives": random_tokens(rng, (batch, 2, 6), VOCABULARY),
            "src_lang_id": np.full(batch, 4, np.int32), "tgt_lang_id": rng.choice([4, 5], size=batch).astype(np.int32)}
    # A hard negative equal to another pair's target: left out of the softmax (BidirectionalDualEncoder).
    for key in ("token_ids", "padding_mask"):
        data["hard_negatives"][key][0, 0, :] = 0 if key == "token_ids" else False
        data["hard_negatives"][key][0, 0, :6] = data["tgt"][key][3, :6]
    return data


def _by_variable(model, gradients, variables):
    """`{(position in model.trainable_variables, name): array or None}`: comparable across equal models."""
    position = {id(v): i for i, v in enumerate(model.trainable_variables)}
    return {(position[id(v)], v.name): None if g is None else np.asarray(tf.convert_to_tensor(g))
            for g, v in zip(gradients, variables)}


def _step_gradients(model, data, traced=False):
    """`({(position, name): gradient or None}, logs)` of one `train_step`: what it hands the optimizer.

    `traced`: the step runs in a `tf.function`, as the trainer runs it.
    """
    seen = {}
    apply = model.apply_gradients

    def record(gradients, variables):
        seen.update({id(v): tf.convert_to_tensor(g) for g, v in zip(gradients, variables) if g is not None})
        return apply(gradients, variables)

    def step(batch):
        logs = model.train_step(batch)
        return logs, dict(seen)

    model.apply_gradients = record
    logs, values = (tf.function(step) if traced else step)(data)
    del model.apply_gradients
    return {(i, v.name): np.asarray(values[id(v)]) if id(v) in values else None
            for i, v in enumerate(model.trainable_variables)}, logs


def _same_mask_reference(model, data, chunk):
    """The full-batch gradient under one tape, each `chunk` rows drawing the cached step's dropout masks."""
    step = model.optimizer.iterations
    with tf.GradientTape() as tape:
        embeddings = {}
        for index, (name, tower) in enumerate(model.towers(data).items()):
            states = gradient_cache.dropout_states(tower.encoder)
            rows = len(tf.nest.flatten(tower.tokens)[0])
            parts = []
            for start in range(0, rows, chunk):
                gradient_cache.seed_dropout(states, gradient_cache.chunk_seed(model.run.seed, step, index,
                                                                              start // chunk))
                part = tf.nest.map_structure(lambda t: t[start : start + chunk], tower.tokens)
                parts.append(tower.encoder(part, training=True))
            embeddings[name] = tf.concat(parts, axis=0)
        loss = model.loss_to_minimize(model.batch_loss(embeddings, _inputs(model, data))["loss"])
    variables = model.trainable_variables
    return _by_variable(model, tape.gradient(loss, variables), variables)


def _inputs(model, data):
    """The batch fields `model` reads: hard negatives only for the objective that asks for them."""
    return data if getattr(model, "num_hard_negatives", 0) else {k: v for k, v in data.items() if k != "hard_negatives"}


def _assert_same(cached, reference):
    assert cached.keys() == reference.keys()
    assert [k for k, g in cached.items() if g is None] == [k for k, g in reference.items() if g is None]
    moved = [name for (_, name), g in reference.items() if g is not None and np.abs(g).max() > 0]
    assert "embeddings" in moved and len(moved) > len(reference) // 2, moved
    # 1e-5, or 1e-5 of the variable's largest gradient entry when that exceeds 1: float32 sums of chunks in another
    # order (an embedding table's rows summed over every occurrence of a token) differ by ~1e-5 of what they add up.
    for path, expected in reference.items():
        if expected is not None:
            atol = 1e-5 * max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(cached[path], expected, atol=atol, rtol=1e-5, err_msg=str(path))


@pytest.mark.parametrize("name", EACH_OBJECTIVE)
def test_without_dropout_the_cached_step_has_the_plain_full_batch_gradient(name):
    data = _batch()
    plain, plain_logs = _step_gradients(_model(name), _inputs(_model(name), data))
    cached_model = _model(name, chunk=CHUNK)
    cached, cached_logs = _step_gradients(cached_model, _inputs(cached_model, data))
    _assert_same(cached, plain)
    for key, value in plain_logs.items():
        assert float(cached_logs[key]) == pytest.approx(float(value), abs=1e-5), key


@pytest.mark.parametrize("name", EACH_OBJECTIVE)
def test_with_dropout_the_cached_step_has_the_full_batch_gradient_under_the_same_masks(name):
    data = _batch()
    model = _model(name, chunk=CHUNK, dropout=0.3)
    model.optimizer.iterations.assign(7)
    reference = _same_mask_reference(model, data, CHUNK)
    cached, _ = _step_gradients(model, _inputs(model, data))
    _assert_same(cached, reference)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bide_ams_hard_negatives", "ems_shared_output_embedding"])
def test_with_dropout_a_traced_cached_step_draws_the_same_masks_twice(name):
    """In a `tf.function` the seed writes and the dropout reads of both passes keep their order."""
    data = _batch()
    model = _model(name, chunk=CHUNK, dropout=0.3)
    model.optimizer.iterations.assign(7)
    reference = _same_mask_reference(model, data, CHUNK)
    _assert_same(_step_gradients(model, _inputs(model, data), traced=True)[0], reference)


def test_dropout_is_on_and_chunk_masks_differ():
    """The reference above would prove nothing if the masks were all equal or dropout did not act."""
    model = _model("translation_ranking", chunk=CHUNK, dropout=0.3)
    data = _batch()
    states = gradient_cache.dropout_states(model.encoder)
    assert len(states) >= 5  # embeddings, and per layer attention probabilities, attention output, feed-forward
    chunk = tf.nest.map_structure(lambda t: t[:CHUNK], data["src"])
    outputs = []
    for chunk_index in (0, 0, 1):
        gradient_cache.seed_dropout(states, gradient_cache.chunk_seed(0, 3, 0, chunk_index))
        outputs.append(model.encoder(chunk, training=True).numpy())
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert np.abs(outputs[0] - outputs[2]).max() > 1e-3
    assert np.abs(outputs[0] - model.encoder(chunk, training=False).numpy()).max() > 1e-3


@pytest.mark.parametrize("mutation", ["fresh masks", "other chunks' seeds"])
def test_re_embedding_without_the_saved_seeds_breaks_equality(monkeypatch, mutation):
    """Mutation test: the second forward of each chunk must draw the first one's masks."""
    data = _batch()
    model = _model("bide_ams_hard_negatives", chunk=CHUNK, dropout=0.3)
    reference = _same_mask_reference(model, data, CHUNK)
    accumulate, seed_dropout = gradient_cache.accumulate_chunk_gradients, gradient_cache.seed_dropout

    def mutated(tower, cached, variables, totals, size, seed_of):
        if mutation == "other chunks' seeds":
            return accumulate(tower, cached, variables, totals, size, lambda chunk: seed_of(chunk + 1))
        monkeypatch.setattr(gradient_cache, "seed_dropout", lambda states, seed: None)
        try:
            return accumulate(tower, cached, variables, totals, size, seed_of)
        finally:
            monkeypatch.setattr(gradient_cache, "seed_dropout", seed_dropout)

    monkeypatch.setattr(gradient_cache, "accumulate_chunk_gradients", mutated)
    cached, _ = _step_gradients(model, data)
    worst = max(np.abs(cached[k] - g).max() for k, g in reference.items() if g is not None)
    assert worst > 1e-3


def test_masks_depend_on_the_step_and_seed_only_so_a_resumed_run_draws_the_same():
    """The generators' running states (which a plain step advances) do not enter a cached step's masks."""
    data = _batch()
    first, second = _model("translation_ranking", chunk=CHUNK, dropout=0.3), _model("translation_ranking",
                                                                                     chunk=CHUNK, dropout=0.3)
    for model in (first, second):
        model.optimizer.iterations.assign(5)
    for _ in range(3):
        second.encoder(data["src"], training=True)  # advances every generator of `second` only
    a, _ = _step_gradients(first, data)
    b, _ = _step_gradients(second, data)
    for path in a:
        np.testing.assert_allclose(a[path], b[path], atol=1e-7, err_msg=str(path))
    c, _ = _step_gradients(first, data)  # step 6 now: other masks
    assert max(np.abs(a[k] - c[k]).max() for k in a) > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_two_replicas_with_chunks_equal_one_replica_with_the_full_batch(two_device_strategy, dropout):
    """Hard negatives and the margin included; chunks are numbered across replicas, so masks agree as well."""
    data = _batch()
    assert_two_replicas_match_one(
        lambda: _model("bide_ams_hard_negatives", chunk=CHUNK, dropout=dropout,
                       optimizer=keras.optimizers.SGD(1.0)), data, two_device_strategy, steps=2)


@pytest.mark.slow
def test_two_replicas_with_chunks_equal_the_plain_full_batch_step(two_device_strategy):
    """Without dropout, the cached two-replica step equals the plain one-replica one."""
    data = _batch()
    single = _model("bide_ams_hard_negatives", optimizer=keras.optimizers.SGD(1.0))
    initial = single.get_weights()
    single.train_step(data)
    with two_device_strategy.scope():
        mirrored = _model("bide_ams_hard_negatives", chunk=CHUNK, optimizer=keras.optimizers.SGD(1.0))
    mirrored.set_weights(initial)

    def halves(context):
        start = BATCH // 2 * context.replica_id_in_sync_group
        return tf.nest.map_structure(lambda t: t[start : start + BATCH // 2], data)

    two_device_strategy.run(tf.function(mirrored.train_step),
                            args=(two_device_strategy.experimental_distribute_values_from_function(halves),))
    for after, other, before in zip(single.get_weights(), mirrored.get_weights(), initial):
        np.testing.assert_allclose(other - before, after - before, atol=1e-5, rtol=1e-5)


def test_a_ragged_last_chunk_and_a_traced_step():
    """A batch that is no multiple of the chunk, in a `tf.function` (as the trainer runs it)."""
    data = _batch(batch=10)
    expected, _ = _step_gradients(_model("translation_ranking"), data)
    _assert_same(_step_gradients(_model("translation_ranking", chunk=CHUNK), data, traced=True)[0], expected)


def test_objectives_with_a_per_pair_loss_refuse_the_switch():
    encoder = SentenceEncoder(VOCABULARY, **TINY)
    with pytest.raises(ValueError, match=r"train.gradient_cache_chunk = 8 needs an objective whose loss couples"):
        MultilingualDistillation(encoder, teacher_dim=16, run=RunFacts(gradient_cache_chunk=8))
    with pytest.raises(ValueError, match=r"train.gradient_cache_chunk = 0 must be a positive"):
        TranslationRanking(encoder, run=RunFacts(gradient_cache_chunk=0))
    assert TranslationRanking(encoder).couples_batch and not MultilingualDistillation(encoder, teacher_dim=16).couples_batch
