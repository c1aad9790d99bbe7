"""FIFO memory queues of vectors held as objective state: seed 002's key queues, the distillation's ranking queue.

An objective owns its queue variables (`[K, d]` each, plus one shared int32
pointer and fill count, all non-trainable with first-replica aggregation, so
every replica writes the same rows); these functions read and write them.
"""

import tensorflow as tf


def enqueue(queues, rows, pointer, filled):
    """Writes the newest `min(n, K)` of each `rows[i]` over the oldest entries of `queues[i]`.

    The queues advance together: one `pointer` (the next slot to write) and
    one `filled` (slots holding a written row, at most `K`).
    """
    size = queues[0].shape[0]
    rows = [values[-size:] for values in rows]
    count = tf.shape(rows[0])[0]
    positions = (pointer.value + tf.range(count)) % size
    for queue, values in zip(queues, rows):
        queue.value.scatter_update(tf.IndexedSlices(tf.cast(values, queue.dtype), positions))
    pointer.assign((pointer.value + count) % size)
    filled.assign(tf.minimum(filled.value + count, size))


def filled_slots(queue, filled):
    """`[K]` booleans: which of `queue`'s slots hold a written row."""
    return tf.range(queue.shape[0]) < filled.value
