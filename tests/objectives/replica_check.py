"""The cross-replica equality check shared by the contrastive objectives' tests."""

import numpy as np
import pytest
import tensorflow as tf


def random_tokens(rng, shape, vocabulary_size):
    """`{"token_ids", "padding_mask"}` of `shape` (last axis: length), each row at least 2 tokens long."""
    ids = rng.integers(4, vocabulary_size, size=shape).astype(np.int32)
    lengths = rng.integers(2, shape[-1] + 1, size=shape[:-1])
    mask = np.arange(shape[-1]) < lengths[..., None]
    return {"token_ids": np.where(mask, ids, 0).astype(np.int32), "padding_mask": mask}


def assert_two_replicas_match_one(make_model, batch, strategy, steps=1):
    """Two replicas with half the batch each equal one replica with all of it.

    `make_model()` builds and compiles a fresh model (same seed, SGD lr 1, no
    dropout); `batch` is a dict of arrays with a leading batch axis. After
    `steps` steps on the same batch, losses and every weight (trained and
    state: EMA copies, queues, pointers) agree within 1e-5 (relative 1e-5 for large updates, 2e-6 of the largest update).
    """
    single = make_model()
    initial = [w.copy() for w in single.get_weights()]
    step_single = tf.function(single.train_step)
    single_logs = [step_single(batch) for _ in range(steps)]
    with strategy.scope():
        mirrored = make_model()
    mirrored.set_weights(initial)
    half = len(next(iter(tf.nest.flatten(batch)))) // 2

    def per_replica(context):
        start = half * context.replica_id_in_sync_group
        return tf.nest.map_structure(lambda t: t[start : start + half], batch)

    distributed = strategy.experimental_distribute_values_from_function(per_replica)

    @tf.function
    def step(data):
        logs = strategy.run(mirrored.train_step, args=(data,))
        return {k: strategy.reduce("MEAN", v, axis=None) for k, v in logs.items()}

    mirrored_logs = [step(distributed) for _ in range(steps)]
    losses = [(float(s["loss"]), float(m["loss"])) for s, m in zip(single_logs, mirrored_logs)]
    for step_index, (single_loss, mirrored_loss) in enumerate(losses):
        assert mirrored_loss == pytest.approx(single_loss, abs=1e-5), (
            f"step {step_index}; (single, mirrored) losses: {losses}")
    after = single.get_weights()
    assert any(not np.allclose(a, b) for a, b in zip(after, initial)), "the step moved no weight"
    scale = max(np.abs(w - w0).max() for w, w0 in zip(after, initial))
    for w_single, w_mirrored, w0 in zip(after, mirrored.get_weights(), initial):
        # Updates of SGD(lr 1) reach ~10 in size; float32 sums in another order (two replicas' grids of other
        # lengths) differ by ~1e-6 of the largest.
        np.testing.assert_allclose(w_mirrored - w0, w_single - w0, rtol=1e-5, atol=max(1e-5, 2e-6 * scale))
