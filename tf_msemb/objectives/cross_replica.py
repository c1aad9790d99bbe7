"""Helpers for losses whose negatives span every replica of a strategy."""

import tensorflow as tf


def num_replicas():
    """Replicas in sync (1 outside a strategy)."""
    return tf.distribute.get_replica_context().num_replicas_in_sync


def gather_candidates(*tensors):
    """All-gathers each `[b, ...]` tensor along the batch axis across replicas.

    Returns the gathered tensors and `labels = range(b) + replica_id * b`, the
    index of each local row in the gathered batch. The all-gather keeps its
    gradient (it all-reduces the upstream gradient and slices this replica's
    part), so summed replica gradients equal the one-device full-batch ones.
    """
    context = tf.distribute.get_replica_context()
    local_batch = tf.shape(tensors[0])[0]
    if context.num_replicas_in_sync == 1:
        return tensors, tf.range(local_batch)
    gathered = tuple(context.all_gather(t, axis=0) for t in tensors)
    offset = tf.cast(context.replica_id_in_sync_group, tf.int32) * local_batch
    return gathered, tf.range(local_batch) + offset
