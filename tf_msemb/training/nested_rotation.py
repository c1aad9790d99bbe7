"""Fits a rotation whose prefixes keep the vectors' cosines (`losses.nested_similarity`), for a trained model.

The rotation stays orthogonal throughout: `R = R0 expm(A - A^T)` (the
exponential of a skew-symmetric matrix is a rotation), with A fitted by Adam
from zero, so every cosine at full width stays exactly as it was and only
which subspace the first d dimensions hold changes. Matryoshka-Adaptor
(Yoon et al. 2024) fits a residual MLP instead, which changes full-width
cosines too; an orthogonal map keeps the export a single matrix (packed
inference, a sentence-transformers Dense module).
"""

import keras
import numpy as np
import tensorflow as tf

from tf_msemb.losses.nested_similarity import nested_similarity_loss


def fit_nested_rotation(vectors, rotation, widths, steps=500, batch_size=1024, learning_rate=1e-3, top_k=10,
                        seed=0, verbose=False):
    """`(R, loss before, loss after)`: `rotation` `[D, D]` (orthogonal, e.g. the principal axes) turned to
    lower `nested_similarity_loss` of `vectors @ R` on random batches of `vectors` `[n, D]`; the losses are
    on one fixed batch of the same size. `verbose`: a progress bar with the batches' loss."""
    vectors = tf.constant(np.asarray(vectors, np.float32))
    start = tf.constant(np.asarray(rotation, np.float32))
    dim = int(start.shape[0])
    batch_size = min(batch_size, int(vectors.shape[0]))
    skew = keras.Variable(np.zeros([dim, dim], np.float32), name="skew")
    optimizer = keras.optimizers.Adam(learning_rate)
    rng = tf.random.Generator.from_seed(seed)

    def turned():
        return tf.matmul(start, tf.linalg.expm(skew - tf.transpose(skew)))

    def loss_on(batch):
        return nested_similarity_loss(batch, tf.matmul(batch, turned()), widths, top_k)

    @tf.function
    def step():
        rows = rng.uniform([batch_size], 0, tf.shape(vectors)[0], dtype=tf.int32)
        batch = tf.gather(vectors, rows)
        with tf.GradientTape() as tape:
            loss = loss_on(batch)
        optimizer.apply_gradients([(tape.gradient(loss, skew), skew)])
        return loss

    fixed = tf.gather(vectors, tf.random.Generator.from_seed(seed + 1).uniform(
        [batch_size], 0, tf.shape(vectors)[0], dtype=tf.int32))
    before = float(loss_on(fixed))
    progress = keras.utils.Progbar(steps, unit_name="step") if verbose else None
    for done in range(1, steps + 1):
        loss = step()
        if progress:
            progress.update(done, [("loss", float(loss))])
    return turned().numpy(), before, float(loss_on(fixed))
