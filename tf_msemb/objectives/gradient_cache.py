"""Gradient caching: one optimizer step over a batch whose encoder activations do not fit at once.

Gao et al. 2021 ("Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup", Sec. 3.2-3.3): a loss that couples the sentences of a batch
(in-batch negatives) needs every embedding at once, but not every encoder
activation. The step splits in three:

1. embed the batch chunk by chunk without a tape (`embed_in_chunks`);
2. the loss on all embeddings (gathered across replicas as usual) and its
   gradient with respect to the embeddings, the cache;
3. embed each chunk again under a tape and accumulate
   `d embeddings / d weights` times the chunk's cached gradient
   (`accumulate_chunk_gradients`).

Chunks run one after another (`parallel_iterations=1`: a chunk's seed
assignment must not meet another chunk's dropout, and only one chunk's
activations may be alive). Peak memory is one chunk's activations plus the
batch's embeddings; the
gradient equals the full-batch one, provided each chunk's second forward
draws the dropout masks of its first. Masks come from Keras' seed
generators: before each chunk forward, `seed_dropout` sets every generator
of the encoder to a state drawn from `chunk_seed(run seed, step, tower,
chunk)`, a stateless function of the optimizer step, so a resumed run
draws the same masks too. Chunks are numbered across replicas (replica r's
chunk i is `r * chunks + i`), so with a per-replica batch that is a
multiple of the chunk, n replicas draw the masks one replica draws for the
whole batch.
"""

import dataclasses
import functools

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Tower:
    """One encoder call whose `[n, d]` output a coupled loss reads: `encoder(tokens, training=True)`."""

    encoder: object
    tokens: dict

    def embed(self, training=True):
        """The whole batch's `[n, d]` embeddings in one forward (the plain step's, or a loss-only evaluation's)."""
        return self.encoder(self.tokens, training=training)


def dropout_states(encoder):
    """The state variables of `encoder`'s seed generators (dropout layers), in a fixed order."""
    return [v for v in encoder.non_trainable_variables if v.path.endswith("seed_generator_state")]


def chunk_seed(run_seed, step, tower, chunk):
    """The stateless `[2]` seed of one chunk's dropout: a function of the run seed, optimizer step, tower and chunk."""
    seed = tf.stack([tf.cast(run_seed, tf.int64), tf.cast(step, tf.int64)])
    seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(tower, tf.int64))
    return tf.random.experimental.stateless_fold_in(seed, tf.cast(chunk, tf.int64))


def seed_dropout(states, seed):
    """Sets each seed-generator state to its own draw from `seed` (distinct generators, distinct masks)."""
    if not states:
        return
    values = tf.random.stateless_uniform([len(states), 2], seed=seed, minval=None, maxval=None, dtype=tf.int64)
    for index, state in enumerate(states):
        state.assign(tf.cast(values[index], state.dtype))


def num_chunks(tokens, size):
    """`ceil(rows / size)` of a tokens dict (the last chunk may be short)."""
    rows = tf.shape(tf.nest.flatten(tokens)[0])[0]
    return (rows + size - 1) // size


def _chunk(structure, index, size):
    return tf.nest.map_structure(lambda t: t[index * size : (index + 1) * size], structure)


def _chunk_plan(tower, size):
    """`(dropout states, chunk count, this replica's first global chunk)`: chunks are numbered across replicas."""
    count = num_chunks(tower.tokens, size)
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return dropout_states(tower.encoder), count, tf.cast(replica, tf.int32) * count


def embed_in_chunks(tower, size, seed_of):
    """`tower`'s embeddings `[n, d]` (float32), `size` rows at a time, recording no gradient.

    `seed_of(global_chunk)` gives each chunk's dropout seed.
    """
    states, count, offset = _chunk_plan(tower, size)
    width = []

    def body(index, parts):
        seed_dropout(states, seed_of(offset + index))
        embedding = tower.encoder(_chunk(tower.tokens, index, size), training=True)
        width[:] = embedding.shape[1:]
        return index + 1, parts.write(index, tf.cast(embedding, tf.float32))

    parts = tf.TensorArray(tf.float32, size=count, infer_shape=False)
    _, parts = tf.while_loop(lambda index, _: index < count, body, (tf.constant(0), parts), parallel_iterations=1)
    embeddings = parts.concat()
    embeddings.set_shape([None, *width])
    return tf.stop_gradient(embeddings)


def _add(total, gradient):
    """`total + gradient`; an embedding table's `IndexedSlices` are added at their rows (no dense copy per chunk)."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.tensor_scatter_nd_add(total, gradient.indices[:, None], tf.cast(gradient.values, total.dtype))
    return total + tf.cast(gradient, total.dtype)


def accumulate_chunk_gradients(tower, cached, variables, totals, size, seed_of):
    """`totals` plus `sum_chunks (d embeddings / d variables)^T cached` of `tower` (step 3).

    Each chunk runs again under a tape with the dropout seed of its first
    forward; `cached` is the loss's `[n, d]` gradient with respect to the
    tower's embeddings. `totals` are dense or None (no gradient yet); a
    variable the tower does not reach keeps its total, None included.
    """
    states, count, offset = _chunk_plan(tower, size)
    reached = set()

    def body(index, *sums):
        seed_dropout(states, seed_of(offset + index))
        with tf.GradientTape() as tape:
            embedding = tower.encoder(_chunk(tower.tokens, index, size), training=True)
        upstream = tf.cast(_chunk(cached, index, size), embedding.dtype)
        gradients = tape.gradient(embedding, variables, output_gradients=upstream)
        reached.update(i for i, g in enumerate(gradients) if g is not None)
        return (index + 1, *[s if g is None else _add(s, g) for s, g in zip(sums, gradients)])

    start = [tf.zeros(v.shape, v.dtype) if t is None else t for v, t in zip(variables, totals)]
    results = tf.while_loop(lambda index, *_: index < count, body, (tf.constant(0), *start), parallel_iterations=1)
    return [s if t is not None or i in reached else None for i, (s, t) in enumerate(zip(results[1:], totals))]


def cached_gradients(towers, loss, variables, size, seed_of):
    """`(results, gradients)` of one gradient-cached step: the three passes, `size` rows per encoder forward.

    `towers` is `{name: Tower}`; `loss(embeddings)` returns `(results, the
    loss to differentiate)` from `{name: [n, d]}`; `seed_of(tower index,
    chunk)` is a chunk's dropout seed. `gradients` follow `variables` (None
    where nothing reaches one): the loss pass's (heads, and any encoder
    weight the loss reads itself) plus every tower's accumulated chunks.
    """
    embeddings = {name: embed_in_chunks(tower, size, functools.partial(seed_of, index))
                  for index, (name, tower) in enumerate(towers.items())}
    with tf.GradientTape() as tape:
        tape.watch(list(embeddings.values()))
        results, scaled_loss = loss(embeddings)
    gradients = tape.gradient(scaled_loss, [*embeddings.values(), *variables])
    cached = dict(zip(embeddings, gradients[: len(embeddings)]))
    totals = [None if g is None else tf.convert_to_tensor(g) for g in gradients[len(embeddings) :]]
    position = {id(variable): index for index, variable in enumerate(variables)}
    # After the loss: the second forwards set the seed states the first ones read.
    with tf.control_dependencies([scaled_loss]):
        for index, (name, tower) in enumerate(towers.items()):
            own = [position[id(v)] for v in tower.encoder.trainable_variables]
            sums = accumulate_chunk_gradients(tower, cached[name], [variables[i] for i in own],
                                              [totals[i] for i in own], size, functools.partial(seed_of, index))
            for i, value in zip(own, sums):
                totals[i] = value
    return results, totals
