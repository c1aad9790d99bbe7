"""`ReplicaInput`: per-replica pipelines whose position a checkpoint restores exactly."""

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.data.distributed import ReplicaInput
from tf_msemb.data.pipeline import make_distributed_dataset


def _tokens(strategy, batch):
    return [t.numpy() for t in strategy.experimental_local_results(batch["src"]["token_ids"])]


def _assert_same_batches(first, second):
    for a, b in zip(first, second):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_restored_iterators_continue_where_they_were_saved(tokenizer, quickstart_records, two_device_strategy,
                                                           tmp_path):
    def make():
        return make_distributed_dataset(two_device_strategy, 8, corpora=[quickstart_records], tokenizer=tokenizer,
                                        max_tokens=48, shuffle_buffer=100, seed=3)

    inputs = make()
    assert inputs.checkpointable and len(inputs.iterators) == 2
    for _ in range(3):
        inputs.next_batch()
    path = tf.train.Checkpoint(data=inputs.iterators).save(str(tmp_path / "ckpt"))
    expected = [_tokens(two_device_strategy, inputs.next_batch()) for _ in range(3)]

    fresh = make()
    assert not np.array_equal(_tokens(two_device_strategy, make().next_batch())[0], expected[0][0])
    tf.train.Checkpoint(data=fresh.iterators).restore(path).assert_existing_objects_matched()
    _assert_same_batches([_tokens(two_device_strategy, fresh.next_batch()) for _ in range(3)], expected)


def test_each_replica_reads_its_own_share(two_device_strategy):
    def dataset_fn(context):
        assert context.num_input_pipelines == 2 and context.num_replicas_in_sync == 2
        batch = context.get_per_replica_batch_size(6)
        return tf.data.Dataset.range(12).shard(2, context.input_pipeline_id).batch(batch)

    inputs = ReplicaInput(two_device_strategy, 6, dataset_fn)
    local = [t.numpy().tolist() for t in two_device_strategy.experimental_local_results(inputs.next_batch())]
    assert local == [[0, 2, 4], [1, 3, 5]]

    @tf.function
    def total():
        return two_device_strategy.reduce("SUM", inputs.next_batch(), axis=0)

    assert int(total()) == sum([6, 8, 10, 7, 9, 11])


def test_global_batch_must_split_evenly(two_device_strategy):
    with pytest.raises(ValueError, match="Global batch 7 is not divisible by 2 replicas"):
        ReplicaInput(two_device_strategy, 7, lambda context: tf.data.Dataset.range(3))


def test_default_strategy_has_one_pipeline():
    inputs = ReplicaInput(tf.distribute.get_strategy(), 4, lambda context: tf.data.Dataset.range(8).batch(4))
    assert len(inputs.iterators) == 1
    assert inputs.next_batch().numpy().tolist() == [0, 1, 2, 3]
