import keras
import numpy as np
import pytest
import tensorflow as tf

from objectives.replica_check import assert_two_replicas_match_one
from objectives.replica_check import random_tokens
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.losses.length_penalty import embedding_length_penalty
from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.losses.translation_ranking import forward_ranking_loss
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.bidirectional_dual_encoder import BidirectionalDualEncoder
from tf_msemb.data.features import HardNegatives

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, max_sequence_length=48)
POOLING = dict(pooling=["max", "mean", "first", "attention"], pooled_dim=12)


def _model(vocabulary_size, optimizer, dropout=0.1, seed=0, scale=10.0, **options):
    keras.utils.set_random_seed(seed)
    encoder = SentenceEncoder(vocabulary_size, dropout=dropout, **TINY, **POOLING)
    model = BidirectionalDualEncoder(encoder, scale=scale, **options)
    model.build()
    model.compile(optimizer=optimizer)
    model.optimizer.build(model.trainable_variables)
    return model


def _batch(rng, batch=8, hard=2):
    data = {"src": random_tokens(rng, (batch, 7), 50), "tgt": random_tokens(rng, (batch, 6), 50)}
    if hard:
        data["hard_negatives"] = random_tokens(rng, (batch, hard, 5), 50)
    return data


@pytest.mark.parametrize("scoring,length_penalty", [("cosine", 0.0), ("dot", 0.5)])
def test_loss_is_ams_plus_length_penalty_on_the_encoder_outputs(scoring, length_penalty):
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, margin=0.3, num_hard_negatives=2,
                   length_penalty=length_penalty, scoring=scoring)
    data = _batch(np.random.default_rng(0))
    logs = model.train_step(data)
    raw_x, raw_y = model.encoder(data["src"]), model.encoder(data["tgt"])
    flat = {k: v.reshape(-1, v.shape[-1]) for k, v in data["hard_negatives"].items()}
    scored = (lambda v: tf.math.l2_normalize(v, axis=-1)) if scoring == "cosine" else (lambda v: v)
    x, y, n = scored(raw_x), scored(raw_y), scored(model.encoder(flat))
    expected = bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0, 0.3, hard_negatives=n)
    expected += embedding_length_penalty(tf.concat([raw_x, raw_y], 0), length_penalty)
    assert float(logs["loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert (float(logs["length_penalty"]) > 0) == (length_penalty > 0)
    assert [(type(f), f.count) for f in model.input_features] == [(HardNegatives, 2)]
    assert _model(50, "sgd").input_features == []


def test_a_length_penalty_under_cosine_scoring_is_refused():
    """Nothing resists it there: it would only shrink the norms and grow the step through the normalization."""
    with pytest.raises(ValueError, match="length_penalty = 0.01 needs scoring = 'dot'"):
        _model(50, "sgd", length_penalty=0.01, scoring="cosine")


def test_unidirectional_baseline_ranks_targets_only():
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, num_hard_negatives=2, bidirectional=False)
    data = _batch(np.random.default_rng(3))
    logs = model.train_step(data)
    x, y = model.encoder(data["src"]), model.encoder(data["tgt"])
    n = model.encoder({k: v.reshape(-1, v.shape[-1]) for k, v in data["hard_negatives"].items()})
    expected = forward_ranking_loss(x, y, np.arange(8), 10.0, 0.3, hard_negatives=n)
    assert float(logs["loss"]) == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(ValueError, match="scoring 'euclidean'"):
        _model(50, "sgd", scoring="euclidean")


# Raw dot products give larger gradients than cosines: a smaller step keeps float32 summation-order noise in 1e-5.
@pytest.mark.slow
@pytest.mark.parametrize("scoring,scale,learning_rate,length_penalty", [("cosine", 10.0, 1.0, 0.0),
                                                                       ("dot", 1.0, 0.1, 0.1)])
@pytest.mark.parametrize("hard", [0, 2])
def test_two_replicas_equal_one_replica_with_the_full_batch(two_device_strategy, hard, scoring, scale, learning_rate,
                                                            length_penalty):
    batch = _batch(np.random.default_rng(1), hard=hard)
    assert_two_replicas_match_one(
        lambda: _model(50, keras.optimizers.SGD(learning_rate), dropout=0.0, num_hard_negatives=hard,
                       length_penalty=length_penalty, scoring=scoring, scale=scale),
        batch,
        two_device_strategy,
    )


@pytest.mark.slow
@pytest.mark.parametrize("scoring,scale,length_penalty", [("cosine", 10.0, 0.0), ("dot", 1.0, 11.0)])
def test_loss_falls_with_hard_negatives_from_records(tokenizer, tmp_path, scoring, scale, length_penalty):
    from conftest import corpus_file

    english = open(corpus_file("train", "en")).read().splitlines()
    german = open(corpus_file("train", "de")).read().splitlines()
    # Hard negatives: the German lines next to the true one (often sharing words with it).
    rows = [(en, de, german[i - 1], german[(i + 1) % len(german)]) for i, (en, de) in enumerate(zip(english, german))]
    write_tfrecords([("en", "de", rows)], str(tmp_path), "hard", 2, verbose=False)
    model = _model(tokenizer.vocabulary_size, keras.optimizers.Adam(3e-3), num_hard_negatives=2,
                   length_penalty=length_penalty, scoring=scoring, scale=scale)
    data = iter(make_dataset(str(tmp_path / "hard.manifest.json"), tokenizer, batch_size=16, max_tokens=48,
                             features=model.input_features))
    step = tf.function(model.train_step, reduce_retracing=True)
    losses = []
    for _ in range(60):
        model.reset_metrics()  # per-step values, not running means
        losses.append(float(step(next(data))["loss"]))
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:5])


def _copy_row(source, row, target, target_row):
    """Makes `target[target_row]` the sentence `source[row]` (features `{"token_ids", "padding_mask"}`), padded to
    the target's length; a sentence longer than the target holds is first cut in its own row too."""
    length = min(int(source["padding_mask"][row].sum()), target["token_ids"].shape[-1])
    source["token_ids"][row][length:], source["padding_mask"][row][length:] = 0, False
    target["token_ids"][target_row], target["padding_mask"][target_row] = 0, False
    target["token_ids"][target_row][:length] = source["token_ids"][row][:length]
    target["padding_mask"][target_row][:length] = True


def _colliding_batch(seed, batch=8, hard=2):
    """Pair 0's second hard negative is pair 5's target (the same tokens, padded to another length)."""
    data = _batch(np.random.default_rng(seed), batch, hard)
    _copy_row(data["tgt"], 5, data["hard_negatives"], (0, 1))
    return data


def test_a_hard_negative_equal_to_a_gathered_target_is_left_out():
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, margin=0.3, num_hard_negatives=2, scoring="cosine")
    data = _colliding_batch(4)
    logs = model.train_step(data)
    unit = lambda v: tf.math.l2_normalize(v, axis=-1)  # noqa: E731
    x, y = unit(model.encoder(data["src"])), unit(model.encoder(data["tgt"]))
    n = unit(model.encoder({k: v.reshape(-1, v.shape[-1]) for k, v in data["hard_negatives"].items()})).numpy()
    np.testing.assert_allclose(n[1], y[5], atol=1e-5)  # the collision: the same sentence
    kept = np.arange(16) != 1
    expected = bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0, 0.3, hard_negatives=n[kept])
    unmasked = bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0, 0.3, hard_negatives=n)
    assert float(logs["loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert float(unmasked) - float(expected) > 1e-3  # pair 5 would see its own translation as a negative


def test_a_collision_across_replicas_is_left_out_as_on_one_replica(two_device_strategy):
    """Pair 0 (replica 0) has pair 5's target (replica 1) as a hard negative: both layouts drop it alike."""
    assert_two_replicas_match_one(
        lambda: _model(50, keras.optimizers.SGD(1.0), dropout=0.0, num_hard_negatives=2, scoring="cosine"),
        _colliding_batch(5),
        two_device_strategy,
    )


def _repeated_source_batch(seed, batch=8, hard=2):
    """Pair 5 repeats pair 1's source with another target: one English sentence paired with two languages."""
    data = _batch(np.random.default_rng(seed), batch, hard)
    _copy_row(data["src"], 1, data["src"], 5)
    return data


def test_a_repeated_source_is_left_out_of_both_directions():
    model = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, margin=0.3, num_hard_negatives=2, scoring="cosine")
    data = _repeated_source_batch(6)
    logs = model.train_step(data)
    unit = lambda v: tf.math.l2_normalize(v, axis=-1)  # noqa: E731
    x, y = unit(model.encoder(data["src"])), unit(model.encoder(data["tgt"]))
    n = unit(model.encoder({k: v.reshape(-1, v.shape[-1]) for k, v in data["hard_negatives"].items()}))
    np.testing.assert_allclose(x[1], x[5], atol=1e-5)
    keep = np.ones((8, 8), bool)
    keep[1, 5] = keep[5, 1] = False
    expected = bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0, 0.3, hard_negatives=n, candidate_mask=keep)
    unmasked = bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0, 0.3, hard_negatives=n)
    assert float(logs["loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert float(unmasked) - float(expected) > 1e-3  # y_1 and y_5 would score x_1 = x_5 alike
    forward = _model(50, keras.optimizers.SGD(0.0), dropout=0.0, margin=0.3, scoring="cosine", bidirectional=False)
    logs = forward.train_step({"src": data["src"], "tgt": data["tgt"]})
    x, y = unit(forward.encoder(data["src"])), unit(forward.encoder(data["tgt"]))
    expected = forward_ranking_loss(x, y, np.arange(8), 10.0, 0.3, candidate_mask=keep)
    assert float(logs["loss"]) == pytest.approx(float(expected), rel=1e-5)


def test_a_source_repeated_across_replicas_is_left_out_as_on_one_replica(two_device_strategy):
    """Pair 1 (replica 0) and pair 5 (replica 1) share their source: both layouts mask it alike."""
    assert_two_replicas_match_one(
        lambda: _model(50, keras.optimizers.SGD(1.0), dropout=0.0, num_hard_negatives=2, scoring="cosine"),
        _repeated_source_batch(7),
        two_device_strategy,
    )
