"""`Objective`: what every training objective shares (run facts, inputs, exports, metrics, the gradient step, config)."""

import contextlib
import dataclasses
import inspect
import threading

import gin
import keras
import tensorflow as tf

from tf_msemb.losses.matryoshka import check_widths
from tf_msemb.losses.matryoshka import matryoshka_loss
from tf_msemb.models.encoder import ensure_built
from tf_msemb.objectives import gradient_cache
from tf_msemb.objectives.cross_replica import clip_summed_gradients
from tf_msemb.objectives.cross_replica import num_replicas

_NOT_OPTIONS = ("self", "encoder", "run")


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What the trainer knows about the run, handed to the objective it builds.

    Args:
        tokenizer: the student's tokenizer (exports carry it).
        total_steps: optimizer steps of the whole run (`train.num_steps`).
        global_batch_size: pairs per step over all replicas.
        seed: the run's random seed (`train.seed`).
        gradient_cache_chunk: rows per encoder forward of a gradient-cached
            step (`train.gradient_cache_chunk`; None: the plain step). Only
            objectives whose loss couples a batch's sentences take it.
        matryoshka_widths: widths d whose nested vectors (the first d
            dimensions, re-normalized) the loss trains too
            (`train.matryoshka_widths`; `losses.matryoshka`); None: the full
            vectors only. Only objectives that `nests` take them.
        matryoshka_weights: the loss weight of each width (default 1 each).
    """

    tokenizer: object = None
    total_steps: int = None
    global_batch_size: int = None
    seed: int = 0
    gradient_cache_chunk: int = None
    matryoshka_widths: tuple = None
    matryoshka_weights: tuple = None


def _gin_bindings(cls):
    """`{argument: value}` that gin binds for `cls` (none when it is not configurable)."""
    try:
        return gin.get_bindings(cls)
    except ValueError:
        return {}


def _dense(gradient):
    return tf.convert_to_tensor(gradient) if isinstance(gradient, tf.IndexedSlices) else gradient


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


class GradientSum:
    """Gradients that several objectives' steps hand over instead of applying, summed per variable.

    `add` takes one objective's gradients of its (replica-scaled) loss times
    `weight`: the sum is the gradient of `sum_t w_t L_t`. Updates an objective
    makes after its optimizer step (`Objective.after_update`: momentum copies)
    wait in `updates` until the summed gradient is applied.
    """

    def __init__(self):
        self.weight = 1.0
        self.updates = []
        self._sums = {}

    def add(self, gradients, variables):
        for gradient, variable in zip(gradients, variables):
            if gradient is None:
                continue
            if self.weight != 1.0:
                gradient = (tf.IndexedSlices(gradient.values * self.weight, gradient.indices, gradient.dense_shape)
                            if isinstance(gradient, tf.IndexedSlices) else gradient * self.weight)
            key = id(variable)
            if key in self._sums:
                gradient = _summed(self._sums[key][0], gradient)
            self._sums[key] = (gradient, variable)

    def gradients_and_variables(self, variables):
        """`(gradients, variables)` of those of `variables` (in their order) that received a gradient; a gradient
        of any other variable is an error (it would be dropped)."""
        stray = set(self._sums) - {id(v) for v in variables}
        if stray:
            raise ValueError(f"Gradients of variables the optimizer does not update: "
                             f"{sorted(self._sums[key][1].path for key in stray)}.")
        pairs = [self._sums[id(v)] for v in variables if id(v) in self._sums]
        return [g for g, _ in pairs], [v for _, v in pairs]


def _summed(a, b):
    """`a + b`; two sparse gradients stay sparse (their rows concatenated: an update adds repeated rows)."""
    if isinstance(a, tf.IndexedSlices) and isinstance(b, tf.IndexedSlices):
        return tf.IndexedSlices(tf.concat([a.values, b.values], 0), tf.concat([a.indices, b.indices], 0),
                                a.dense_shape)
    return _dense(a) + _dense(b)


class Objective(keras.Model):
    """A `keras.Model` around a sentence encoder whose `train_step` implements one method.

    A subclass declares the batch fields it needs beyond `src`/`tgt` tokens
    (`input_features`), the encoders a run exports (`exports`), creates its
    metrics with `add_trackers`, and inside `train_step` computes a loss under
    a `tf.GradientTape`, turns it into the value to differentiate with
    `loss_to_minimize` (still inside the tape), steps with `minimize` and
    returns `report(name=value, ...)`. Its constructor arguments other than
    the encoder are its `options` (config and export metadata), read from
    the call itself, so no subclass lists them again.

    An objective whose loss couples the sentences of a batch (in-batch
    negatives) instead names its encoder calls (`towers`) and its loss on
    their outputs (`batch_loss`), and steps with `embedding_step`: the plain
    step, or with `run.gradient_cache_chunk` the gradient-cached one
    (`objectives.gradient_cache`), whose gradient is the same. One whose
    `batch_loss` scores the cosines of those outputs alone (no head, no
    other vectors) sets `nests`: with `run.matryoshka_widths` its loss is
    then the Matryoshka sum over nested widths (`losses.matryoshka`).

    Args:
        encoder: tokens -> `[b, d]` (the model exported after training).
        run: the trainer's `RunFacts` (None outside the trainer, e.g. in tests).
    """

    def __new__(cls, *args, **kwargs):
        instance = super().__new__(cls, *args, **kwargs)
        signature = inspect.signature(cls.__init__)
        arguments = signature.bind(None, *args, **kwargs)
        # gin passes its bindings to `__init__` only: read them here, so options hold what the run used.
        for name, value in _gin_bindings(cls).items():
            if name in signature.parameters:
                arguments.arguments.setdefault(name, value)
        arguments.apply_defaults()
        instance._constructor_options = {
            name: _plain(value) for name, value in arguments.arguments.items()
            if name not in _NOT_OPTIONS and signature.parameters[name].kind is not inspect.Parameter.VAR_KEYWORD
        }
        return instance

    def __init__(self, encoder, run=None, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.run = run or RunFacts()
        self._trackers = []
        # Per thread: MirroredStrategy traces each replica's step in a thread of its own.
        self._handover = threading.local()
        chunk = self.run.gradient_cache_chunk
        if chunk is not None and not self.couples_batch:
            raise ValueError(f"train.gradient_cache_chunk = {chunk} needs an objective whose loss couples the "
                             f"sentences of a batch; {type(self).__name__}'s loss is per pair (unset it).")
        if chunk is not None and chunk < 1:
            raise ValueError(f"train.gradient_cache_chunk = {chunk} must be a positive number of rows.")
        self.matryoshka = None
        if self.run.matryoshka_weights and not self.run.matryoshka_widths:
            raise ValueError(f"train.matryoshka_weights = {list(self.run.matryoshka_weights)} needs "
                             "train.matryoshka_widths, one width per weight.")
        if self.run.matryoshka_widths:
            if not self.nests:
                raise ValueError(f"train.matryoshka_widths = {list(self.run.matryoshka_widths)} needs an objective "
                                 "whose loss scores the cosines of the sentence vectors alone; "
                                 f"{type(self).__name__}'s does not (unset it).")
            self.matryoshka = check_widths(self.run.matryoshka_widths, self.run.matryoshka_weights,
                                           ensure_built(encoder).output_dim)

    @property
    def options(self):
        """The constructor's own arguments other than `encoder` and `run` (Keras' `**kwargs` excluded)."""
        return dict(self._constructor_options)

    @property
    def input_features(self):
        """`data.features.InputFeature`s the batches must carry beyond `src`/`tgt` tokens (none by default)."""
        return []

    def make_input(self, dataset_fn, strategy, global_batch_size, **kwargs):
        """The run's input: `dataset_fn` (`train.dataset_fn`) with this objective's `input_features`.

        `kwargs` (`tokenizer`, `seed`) go to `dataset_fn`. The result has
        `next_batch()`, `iterators` (what checkpoints hold), `checkpointable`,
        `source_files` and `corpora` (`data.distributed.ReplicaInput`).
        """
        return dataset_fn(strategy, global_batch_size, features=self.input_features, **kwargs)

    def steps(self, inputs):
        """`{key: (next_batch, replica_step)}`: the steps a run takes, each fed by its own input.

        `step_key(k)` picks the one for step k; the trainer compiles each
        once. One objective has one: `train_step` on `inputs.next_batch()`.
        """
        return {None: (inputs.next_batch, self.train_step)}

    def step_key(self, step):
        """The `steps` key of the step taken after `step` steps (a function of the step alone, so resuming is
        exact)."""
        return None

    def exports(self):
        """`{name: (tokenizer, encoder)}` of the models a run exports; `"encoder"` is the main one."""
        return {"encoder": (self.run.tokenizer, self.encoder)}

    nests = False

    @property
    def couples_batch(self):
        """Whether this objective steps through `towers` and `batch_loss` (and so can cache gradients)."""
        return type(self).towers is not Objective.towers

    def towers(self, data):
        """`{name: gradient_cache.Tower}`: the encoder calls whose outputs `batch_loss` reads."""
        raise NotImplementedError(f"{type(self).__name__} does not split its step into towers and a batch loss.")

    def batch_loss(self, embeddings, data):
        """`{"loss": ..., other reported values}` from `{name: [n, d] embedding}` of `towers(data)`."""
        raise NotImplementedError(f"{type(self).__name__} does not split its step into towers and a batch loss.")

    def xla_obstacle(self, binding="train.gradient_cache_chunk"):
        """Why this objective's step cannot be compiled by XLA (None: it can); `binding` names the setting."""
        if self.run.gradient_cache_chunk:
            return (f"{binding} = {self.run.gradient_cache_chunk} runs its chunks in a loop of dynamic slices, "
                    "which XLA does not compile")
        return None

    def add_trackers(self, *names):
        """Running means that `report` updates by name."""
        self._trackers = self._trackers + [keras.metrics.Mean(name=name) for name in names]

    @property
    def metrics(self):
        return list(self._trackers)

    def build(self, inputs_shape=None):
        ensure_built(self.encoder)
        self.built = True

    def call(self, inputs, training=False):
        return self.encoder(inputs, training=training)

    def loss_to_minimize(self, loss):
        """The loss this replica differentiates.

        The optimizer sums replica gradients, so a hand-written loss is divided
        by the replica count; under `mixed_float16` the loss scale multiplies it
        (the `LossScaleOptimizer` divides the gradients back in `apply`).
        """
        return self.optimizer.scale_loss(loss / num_replicas())

    def minimize(self, tape, scaled_loss, variables=None):
        """One optimizer step on `variables` (default: every trainable variable).

        With the optimizer's `global_clipnorm`, the gradient summed over
        replicas is clipped (`clip_summed_gradients`), as a one-device run
        with the whole batch would clip it. An embedding table's sparse
        gradient (`IndexedSlices`) is made dense here, as PyTorch's
        `nn.Embedding` gradient is: handed the slices, Keras' Adam squares each
        occurrence of a repeated token apart (its second moment sums g_i^2,
        not (sum g_i)^2) and densifies them once per moment (MiniLM: 0.2 s of
        a 1.2 s step). Replicas then all-reduce the whole table's gradient.
        An optimizer that updates touched rows only (`touched_rows`,
        `training.touched_rows`) gets the slices as they are.
        """
        variables = self.trainable_variables if variables is None else variables
        self.apply_gradients(tape.gradient(scaled_loss, variables), variables)

    @contextlib.contextmanager
    def handing_gradients_to(self, gradient_sum, weight=1.0):
        """Within it, steps add their gradients times `weight` to `gradient_sum` instead of applying them, and
        `after_update` waits for the sum's step (a multi-task step: `objectives.multi_task`)."""
        self._handover.gradient_sum, gradient_sum.weight = gradient_sum, weight
        try:
            yield
        finally:
            self._handover.gradient_sum, gradient_sum.weight = None, 1.0

    def after_update(self, update):
        """Runs `update()` (state that follows the weights: momentum copies) once this step's gradient is applied."""
        gradient_sum = getattr(self._handover, "gradient_sum", None)
        if gradient_sum is None:
            update()
        else:
            gradient_sum.updates.append(update)

    def apply_gradients(self, gradients, variables):
        """Applies this replica's gradients of the scaled loss (densified, clipped as in `minimize`), or hands
        them over (`handing_gradients_to`)."""
        gradient_sum = getattr(self._handover, "gradient_sum", None)
        if gradient_sum is not None:
            gradient_sum.add(gradients, variables)
            return
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        if not getattr(optimizer, "touched_rows", False):
            gradients = [_dense(g) for g in gradients]
        clip_norm = getattr(optimizer, "global_clipnorm", None)
        if clip_norm:
            # Gradients of a scaled loss (mixed_float16) are scaled too; so is the threshold.
            gradients = clip_summed_gradients(gradients, clip_norm * self.optimizer.scale_loss(1.0))
        self.optimizer.apply(gradients, variables)

    def vector_loss(self, embeddings, data):
        """`batch_loss`, or with `run.matryoshka_widths` its weighted sum over the nested widths."""
        if self.matryoshka is None:
            return self.batch_loss(embeddings, data)
        return matryoshka_loss(lambda nested: self.batch_loss(nested, data), embeddings, *self.matryoshka)

    def embedding_step(self, data):
        """One optimizer step on `batch_loss(towers(data))`; returns its results.

        Plain: every tower embeds the whole batch under one tape. With
        `run.gradient_cache_chunk`: the three passes of
        `objectives.gradient_cache`, `chunk` rows per encoder forward; the
        same gradient (same dropout masks) in a chunk's activations.
        """
        towers = self.towers(data)
        if self.run.gradient_cache_chunk is None:
            with tf.GradientTape() as tape:
                embeddings = {name: tower.embed() for name, tower in towers.items()}
                results = self.vector_loss(embeddings, data)
                scaled_loss = self.loss_to_minimize(results["loss"])
            self.minimize(tape, scaled_loss)
            return results
        return self._cached_step(towers, data)

    def _cached_step(self, towers, data):
        def seed_of(tower, chunk):
            return gradient_cache.chunk_seed(self.run.seed, self.optimizer.iterations, tower, chunk)

        def loss(embeddings):
            results = self.vector_loss(embeddings, data)
            return results, self.loss_to_minimize(results["loss"])

        variables = self.trainable_variables
        results, gradients = gradient_cache.cached_gradients(towers, loss, variables, self.run.gradient_cache_chunk,
                                                             seed_of)
        self.apply_gradients(gradients, variables)
        return results

    def report(self, **values):
        """Updates each tracker with the value of its name and returns every tracker's result.

        Every tracker needs a value and every value a tracker, so a metric
        can neither go missing nor land under another name.
        """
        names = [tracker.name for tracker in self._trackers]
        if sorted(values) != sorted(names):
            raise ValueError(f"{type(self).__name__} reports {sorted(values)} but tracks {sorted(names)}.")
        for tracker in self._trackers:
            tracker.update_state(values[tracker.name])
        return {tracker.name: tracker.result() for tracker in self._trackers}

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder), **self.options)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def accuracy(x, candidates, labels):
    """Fraction of rows of `x` whose most similar candidate is the one at `labels`."""
    hits = tf.argmax(tf.matmul(x, candidates, transpose_b=True), axis=1, output_type=tf.int32) == labels
    return tf.reduce_mean(tf.cast(hits, tf.float32))
