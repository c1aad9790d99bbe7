import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.translation_ranking import TranslationRanking
from tf_msemb.training.fused_adam import FusedAdam
from tf_msemb.training.fused_adam import FusedAdamW
from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.training.touched_rows import TouchedRowsAdam
from tf_msemb.training.touched_rows import TouchedRowsAdamW
from tf_msemb.training.touched_rows import TouchedRowsUnfusedAdam
from tf_msemb.training.touched_rows import TouchedRowsUnfusedAdamW

OPTIONS = {"learning_rate": 0.05, "beta_1": 0.8, "beta_2": 0.95, "epsilon": 0.01}
ROWS, WIDTH = 6, 3


def _variables():
    rng = np.random.default_rng(0)
    return [keras.Variable(rng.standard_normal((ROWS, WIDTH)).astype(np.float32), name="embeddings"),
            keras.Variable(rng.standard_normal((WIDTH,)).astype(np.float32), name="bias")]


def _slices(ids, values):
    return tf.IndexedSlices(tf.constant(values, tf.float32), tf.constant(ids, tf.int64), tf.constant([ROWS, WIDTH]))


def _run(optimizer, steps):
    """Variables and the table's moments after `steps`, each `(ids, table slice values, bias gradient)`."""
    variables = _variables()
    optimizer.build(variables)
    for ids, values, bias in steps:
        table = _slices(ids, values)
        if not getattr(optimizer, "touched_rows", False):
            table = tf.convert_to_tensor(table)
        optimizer.apply([table, tf.constant(bias, tf.float32)], variables)
    index = optimizer._get_variable_index(variables[0])
    return ([v.numpy() for v in variables], optimizer._momentums[index].numpy(),
            optimizer._velocities[index].numpy())


def _lazy_adam_numpy(steps, weight_decay):
    """The table after `steps` by hand: Adam on the distinct rows of each step (repeated ids summed), with
    the step's bias correction and AdamW's decay on those rows only; other rows and their moments untouched."""
    table = _variables()[0].numpy().astype(np.float64)
    m, v = np.zeros_like(table), np.zeros_like(table)
    lr, b1, b2, eps = (OPTIONS[k] for k in ("learning_rate", "beta_1", "beta_2", "epsilon"))
    for t, (ids, values, _) in enumerate(steps, start=1):
        g = np.zeros_like(table)
        np.add.at(g, ids, np.asarray(values, np.float64))
        rows = sorted(set(ids))
        m[rows] = b1 * m[rows] + (1 - b1) * g[rows]
        v[rows] = b2 * v[rows] + (1 - b2) * g[rows] ** 2
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        table[rows] -= lr * weight_decay * table[rows]
        table[rows] -= alpha * m[rows] / (np.sqrt(v[rows]) + eps)
    return table, m, v


def _every_row_steps():
    rng = np.random.default_rng(1)
    return [(list(range(ROWS)) + [2, 2], rng.standard_normal((ROWS + 2, WIDTH)) * (s + 1), rng.standard_normal(WIDTH))
            for s in range(3)]


@pytest.mark.parametrize("touched, dense, options", [
    (TouchedRowsAdamW, FusedAdamW, {"weight_decay": 0.1}), (TouchedRowsAdam, FusedAdam, {}),
    (TouchedRowsUnfusedAdamW, keras.optimizers.AdamW, {"weight_decay": 0.1}),
    (TouchedRowsUnfusedAdam, keras.optimizers.Adam, {})])
def test_steps_that_touch_every_row_are_dense_adam_s_steps(touched, dense, options):
    """Every row in every step (row 2 twice: summed before squaring, as the dense gradient sums it): the same
    weights as dense Adam to float rounding, the bias exempt from the decay in both."""
    results = []
    for cls in (touched, dense):
        optimizer = cls(**OPTIONS, **options)
        if options:
            optimizer.exclude_from_weight_decay(var_names=["bias"])
        results.append(_run(optimizer, _every_row_steps()))
    (touched_vars, *_), (dense_vars, *_) = results
    start = _variables()
    for got, want, first in zip(touched_vars, dense_vars, start):
        assert np.abs(want - first.numpy()).max() > 0.1
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_untouched_rows_keep_weights_and_moments_where_dense_adam_moves_them():
    """Step 1 touches every row, steps 2-3 rows 0 and 4 (4 twice): rows 1-3 and 5 and their moments stay as
    step 1 left them, the touched rows follow Adam by hand; dense AdamW moves the others (stale m, decay)."""
    rng = np.random.default_rng(2)
    steps = _every_row_steps()[:1] + [([0, 4, 4], rng.standard_normal((3, WIDTH)), np.zeros(WIDTH))
                                      for _ in range(2)]
    optimizer = TouchedRowsAdamW(**OPTIONS, weight_decay=0.1)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    (table, _), m, v = _run(optimizer, steps)
    want_table, want_m, want_v = _lazy_adam_numpy(steps, 0.1)
    np.testing.assert_allclose(table, want_table, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m, want_m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, want_v, rtol=1e-5, atol=1e-7)
    after_first, *_ = _run(TouchedRowsAdamW(**OPTIONS, weight_decay=0.1), steps[:1])
    untouched = [1, 2, 3, 5]
    np.testing.assert_array_equal(table[untouched], after_first[0][untouched])
    dense = FusedAdamW(**OPTIONS, weight_decay=0.1)
    (dense_table, _), *_ = _run(dense, steps)
    assert np.abs(dense_table[untouched] - after_first[0][untouched]).min() > 1e-3


def test_global_clipnorm_clips_slices_as_it_clips_the_dense_gradient():
    results = []
    for cls in (TouchedRowsAdam, FusedAdam):
        results.append(_run(cls(**OPTIONS, global_clipnorm=0.5), _every_row_steps()))
    np.testing.assert_allclose(results[0][0][0], results[1][0][0], rtol=1e-5, atol=1e-6)
    unclipped = _run(FusedAdam(**OPTIONS), _every_row_steps())
    assert np.abs(unclipped[0][0] - results[1][0][0]).max() > 1e-3


def test_the_option_names_its_optimizers():
    assert isinstance(make_optimizer(10, name="adamw", embedding_update="touched_rows"), TouchedRowsAdamW)
    assert isinstance(make_optimizer(10, name="adam", embedding_update="touched_rows"), TouchedRowsAdam)
    # fused=False keeps Keras' elementwise update for the dense variables, touched rows or not.
    for name, plain in (("adamw", keras.optimizers.AdamW), ("adam", keras.optimizers.Adam)):
        unfused = make_optimizer(10, name=name, embedding_update="touched_rows", fused=False)
        assert unfused.touched_rows and type(unfused).__mro__[2] is plain, type(unfused).__mro__
        assert not isinstance(unfused, (FusedAdam, FusedAdamW))
        assert not isinstance(make_optimizer(10, name=name, fused=False), (FusedAdam, FusedAdamW))
    with pytest.raises(ValueError, match="'adam' and 'adamw', not 'lars'"):
        make_optimizer(10, name="lars", embedding_update="touched_rows")
    with pytest.raises(ValueError, match="embedding_update is 'sparse'"):
        make_optimizer(10, embedding_update="sparse")


def _translation_step(optimizer):
    """One TranslationRanking step: `(table before, table after, other weights moved)`; tokens 1-3, 5, 7, 9."""
    keras.utils.set_random_seed(3)
    encoder = SentenceEncoder(vocabulary_size=40, max_sequence_length=8, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=16, dropout=0.0)
    model = TranslationRanking(encoder)
    model.compile(optimizer=optimizer)
    model.build()
    model.optimizer.build(model.trainable_variables)
    ids = np.array([[1, 5, 7, 2, 0], [1, 9, 9, 9, 2], [1, 3, 2, 0, 0]], np.int32)
    side = {"token_ids": tf.constant(ids), "padding_mask": tf.constant(ids > 0)}
    table = encoder.backbone.token_embedding.embeddings
    others = [v for v in model.trainable_variables if v is not table]
    before, others_before = table.numpy(), [v.numpy() for v in others]
    model.train_step({"src": side, "tgt": side})
    moved = max(np.abs(v.numpy() - b).max() for v, b in zip(others, others_before))
    return before, table.numpy(), moved


def test_an_objective_hands_the_slices_to_a_touched_rows_optimizer():
    """Through `Objective.minimize`: the rows of tokens the batch used move, the other 34 rows stay exactly; dense
    AdamW's decay moves every row."""
    used = [1, 2, 3, 5, 7, 9]
    before, after, moved = _translation_step(TouchedRowsAdamW(learning_rate=0.1, weight_decay=0.1))
    assert moved > 1e-3 and np.abs(after[used] - before[used]).min() > 1e-3
    np.testing.assert_array_equal(np.delete(after, used, axis=0), np.delete(before, used, axis=0))
    before, after, _ = _translation_step(FusedAdamW(learning_rate=0.1, weight_decay=0.1))
    assert np.abs(np.delete(after, used, axis=0) - np.delete(before, used, axis=0)).max() > 1e-4


def test_a_two_replica_step_sums_the_replicas_slices(two_device_strategy):
    """Each replica applies half of the steps' slices: the optimizer's cross-replica sum gives the one-device
    update."""
    strategy = two_device_strategy
    steps = _every_row_steps()
    want, *_ = _run(TouchedRowsAdamW(**OPTIONS, weight_decay=0.1), steps)
    with strategy.scope():
        optimizer = TouchedRowsAdamW(**OPTIONS, weight_decay=0.1)
        variables = _variables()
        optimizer.build(variables)

    @tf.function
    def apply(ids, values, bias):
        def replica_step(ids, values, bias):
            optimizer.apply([tf.IndexedSlices(values / 2, ids, tf.constant([ROWS, WIDTH], tf.int64)), bias / 2],
                            variables)
        strategy.run(replica_step, args=(ids, values, bias))

    for ids, values, bias in steps:
        apply(tf.constant(ids, tf.int64), tf.constant(values, tf.float32), tf.constant(bias, tf.float32))
    np.testing.assert_allclose(variables[0].numpy(), want[0], rtol=1e-5, atol=1e-6)
