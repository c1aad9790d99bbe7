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


def clip_summed_gradients(gradients, clip_norm):
    """This replica's share of the replicas' summed gradient, clipped to `clip_norm` by its global norm.

    Keras clips each replica's gradient before the optimizer sums them, so a
    clipped run on n replicas differs from one replica with the whole batch.
    PyTorch DDP (seed 002) clips the summed gradient: here every replica
    sums the gradients itself, clips that sum, and hands the optimizer
    `sum / n`, which the optimizer's own summation turns back into the
    clipped sum (its per-replica clipping, if any, no longer binds).
    Gradients are dense (`Objective.minimize` densifies embedding slices).
    """
    present = [i for i, g in enumerate(gradients) if g is not None]
    values = [gradients[i] for i in present]
    replicas = num_replicas()
    if replicas > 1:
        values = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, values)
    values, _ = tf.clip_by_global_norm(values, clip_norm)
    clipped = list(gradients)
    for i, value in zip(present, values):
        clipped[i] = value / replicas
    return clipped
