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


def summed_slices(gradient):
    """`IndexedSlices` with each row once, holding the sum of its slices (a gather's gradient repeats a row per use).

    What the dense gradient holds on those rows: its norm, and Adam's second
    moment, are of the sum, not of each use.
    """
    rows, position = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(rows)[0])
    return tf.IndexedSlices(values, rows, gradient.dense_shape)


def clip_summed_gradients(gradients, clip_norm):
    """This replica's share of the replicas' summed gradient, clipped to `clip_norm` by its global norm.

    Keras clips each replica's gradient before the optimizer sums them, so a
    clipped run on n replicas differs from one replica with the whole batch.
    PyTorch DDP (seed 002) clips the summed gradient: here every replica
    sums the gradients itself, clips that sum, and hands the optimizer
    `sum / n`, which the optimizer's own summation turns back into the
    clipped sum (its per-replica clipping, if any, no longer binds).
    An embedding table's `IndexedSlices` (kept for a touched-rows optimizer)
    stay slices: all-reduced by concatenation, each row summed once
    (`summed_slices`) before the norm, their values scaled.
    """
    present = [i for i, g in enumerate(gradients) if g is not None]
    values = [gradients[i] for i in present]
    replicas = num_replicas()
    if replicas > 1:
        values = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, values)
    values = [summed_slices(v) if isinstance(v, tf.IndexedSlices) else v for v in values]
    values, _ = tf.clip_by_global_norm(values, clip_norm)
    clipped = list(gradients)
    for i, value in zip(present, values):
        if isinstance(value, tf.IndexedSlices):
            clipped[i] = tf.IndexedSlices(value.values / replicas, value.indices, value.dense_shape)
        else:
            clipped[i] = value / replicas
    return clipped
