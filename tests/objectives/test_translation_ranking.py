import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.pipeline import make_dataset
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.translation_ranking import TranslationRanking

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, max_sequence_length=48)


def _model(vocabulary_size, optimizer, dropout=0.1, seed=0):
    keras.utils.set_random_seed(seed)
    model = TranslationRanking(SentenceEncoder(vocabulary_size, dropout=dropout, **TINY), scale=10.0)
    model.build()
    model.compile(optimizer=optimizer)
    model.optimizer.build(model.trainable_variables)
    return model


def test_loss_falls_on_real_pairs(tokenizer, quickstart_records):
    model = _model(tokenizer.vocabulary_size, keras.optimizers.Adam(3e-3))
    data = iter(make_dataset([quickstart_records], tokenizer, batch_size=16, max_tokens=48))
    step = tf.function(model.train_step, reduce_retracing=True)
    losses = [float(step(next(data))["loss"]) for _ in range(100)]  # running means of the loss
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:5])
    assert float(step(next(data))["accuracy"]) > 0.3


def _fixed_batch(rng, batch, length, vocabulary_size):
    def side():
        ids = rng.integers(4, vocabulary_size, size=(batch, length)).astype(np.int32)
        lengths = rng.integers(2, length + 1, size=batch)
        mask = np.arange(length)[None, :] < lengths[:, None]
        return {"token_ids": np.where(mask, ids, 0).astype(np.int32), "padding_mask": mask}

    return {"src": side(), "tgt": side()}


def test_two_replicas_equal_one_replica_with_the_full_batch(two_device_strategy):
    """Cross-replica negatives: 2 x b on two devices == 1 x 2b on one (loss and update)."""
    rng = np.random.default_rng(0)
    batch = _fixed_batch(rng, 8, 7, 50)
    single = _model(50, keras.optimizers.SGD(1.0), dropout=0.0)
    single_logs = tf.function(single.train_step)(batch)

    with two_device_strategy.scope():
        mirrored = _model(50, keras.optimizers.SGD(1.0), dropout=0.0, seed=1)
    # Start from the single model's initial weights (recomputed: same seed).
    initial = _model(50, keras.optimizers.SGD(1.0), dropout=0.0).get_weights()
    mirrored.set_weights(initial)

    def per_replica(context):
        half = 4 * context.replica_id_in_sync_group
        return tf.nest.map_structure(lambda t: t[half : half + 4], batch)

    distributed = two_device_strategy.experimental_distribute_values_from_function(per_replica)

    @tf.function
    def step(data):
        logs = two_device_strategy.run(mirrored.train_step, args=(data,))
        return {k: two_device_strategy.reduce("MEAN", v, axis=None) for k, v in logs.items()}

    mirrored_logs = step(distributed)
    assert float(mirrored_logs["loss"]) == pytest.approx(float(single_logs["loss"]), abs=1e-5)
    # SGD with lr 1: the weight change is the (replica-summed) gradient.
    single_after = single.get_weights()
    for w_single, w_mirrored, w0 in zip(single_after, mirrored.get_weights(), initial):
        np.testing.assert_allclose(w_mirrored - w0, w_single - w0, atol=1e-5)
    assert any(not np.allclose(a, b) for a, b in zip(single_after, initial)), "the step moved no weight"


def test_temperature_overrides_scale():
    model = TranslationRanking(SentenceEncoder(10, **TINY), scale=3.0, temperature=0.05)
    assert model.scale == pytest.approx(20.0)


def test_nested_widths_train_the_weighted_sum_of_each_prefix_loss():
    """With `run.matryoshka_widths`, the step's loss is `sum_d w_d L(normalize(v[:, :d]))` (plain and
    gradient-cached steps alike); objectives whose loss reads more than the vectors' cosines refuse."""
    from tf_msemb.objectives.base import RunFacts
    from tf_msemb.objectives.bidirectional_dual_encoder import BidirectionalDualEncoder
    from tf_msemb.objectives.dual_momentum_contrast import DualMomentumContrast
    from tf_msemb.objectives.ems import EMS

    rng = np.random.default_rng(1)
    ids = rng.integers(4, 40, size=(2, 6, 5)).astype(np.int32)
    data = {side: {"token_ids": tf.constant(ids[i]), "padding_mask": tf.ones((6, 5), tf.bool)}
            for i, side in enumerate(("src", "tgt"))}
    losses = {}
    for chunk in (None, 4):
        keras.utils.set_random_seed(2)
        encoder = SentenceEncoder(40, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=16,
                                  max_sequence_length=8, dropout=0.0)
        model = TranslationRanking(encoder, scale=5.0, run=RunFacts(matryoshka_widths=(4, 16, 8),
                                                                    matryoshka_weights=(2.0, 1.0, 0.5),
                                                                    gradient_cache_chunk=chunk))
        model.compile(optimizer=keras.optimizers.SGD(0.0))
        model.build()
        x, y = encoder(data["src"]).numpy(), encoder(data["tgt"]).numpy()
        expected = 0.0
        for width, weight in [(16, 1.0), (8, 0.5), (4, 2.0)]:
            scores = 5.0 * (x[:, :width] / np.linalg.norm(x[:, :width], axis=1, keepdims=True)) @ (
                y[:, :width] / np.linalg.norm(y[:, :width], axis=1, keepdims=True)).T
            forward = -np.mean(np.diag(scores) - np.log(np.exp(scores).sum(axis=1)))
            backward = -np.mean(np.diag(scores) - np.log(np.exp(scores).sum(axis=0)))
            expected += weight * (forward + backward)
        losses[chunk] = float(model.train_step(data)["loss"])
        assert losses[chunk] == pytest.approx(expected, rel=1e-4)
    for cls, options in [(EMS, {}), (DualMomentumContrast, {"queue_size": 8}),
                         (BidirectionalDualEncoder, {"scoring": "dot"})]:
        encoder = SentenceEncoder(40, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=16,
                                  max_sequence_length=8)
        with pytest.raises(ValueError, match="matryoshka_widths"):
            cls(encoder, run=RunFacts(matryoshka_widths=(8,)), **options)
    with pytest.raises(ValueError, match="needs train.matryoshka_widths"):
        TranslationRanking(SentenceEncoder(40, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=16,
                                           max_sequence_length=8), run=RunFacts(matryoshka_weights=(1.0,)))
    with pytest.raises(ValueError, match="within the vectors' 16"):
        TranslationRanking(SentenceEncoder(40, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=16,
                                           max_sequence_length=8), run=RunFacts(matryoshka_widths=(32,)))


def test_a_repeated_target_is_no_negative_for_its_twin():
    """Pairs 2 and 6 share their target (one German sentence translating two English ones): each pair's loss
    leaves the other out, both ways, and differs from the unmasked loss."""
    from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss

    batch = _fixed_batch(np.random.default_rng(3), 8, 7, 50)
    for key in ("token_ids", "padding_mask"):
        batch["tgt"][key][6] = batch["tgt"][key][2]
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0)
    logs = model.train_step(batch)
    x = tf.math.l2_normalize(model.encoder(batch["src"]), axis=-1)
    y = tf.math.l2_normalize(model.encoder(batch["tgt"]), axis=-1)
    keep = np.ones((8, 8), bool)
    keep[2, 6] = keep[6, 2] = False
    expected = bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0, candidate_mask=keep)
    assert float(logs["loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert abs(float(bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0)) - float(expected)) > 1e-3


def test_sentence_keys_ignore_padding_tell_orders_apart_and_compile_with_xla():
    from tf_msemb.objectives.translation_ranking import sentence_keys

    rng = np.random.default_rng(0)
    a = _fixed_batch(rng, 64, 9, 250_000)["src"]
    shorter = {"token_ids": a["token_ids"][:8, :9].copy(), "padding_mask": a["padding_mask"][:8].copy()}
    wide = {key: np.pad(value[:8], [[0, 0], [0, 5]]) for key, value in a.items()}  # the same rows, padded further
    swapped = {key: value[:8].copy() for key, value in a.items()}
    swapped["token_ids"][:, [0, 1]] = swapped["token_ids"][:, [1, 0]]
    keys, wide_keys, swapped_keys = (k.numpy() for k in sentence_keys(a, wide, swapped))
    np.testing.assert_array_equal(wide_keys, keys[:8])
    assert len(set(keys)) == len({tuple(row[mask]) for row, mask in zip(a["token_ids"], a["padding_mask"])})
    differs = swapped["token_ids"][:, 0] != swapped["token_ids"][:, 1]
    assert differs.any() and not np.any(swapped_keys[differs] == keys[:8][differs])
    compiled = tf.function(lambda tokens: sentence_keys(tokens)[0], jit_compile=True)
    np.testing.assert_array_equal(compiled(shorter).numpy(), keys[:8])
