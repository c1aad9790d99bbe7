"""`Objective`: what every training objective shares (run facts, inputs, exports, metrics, the gradient step, config)."""

import dataclasses
import inspect

import gin
import keras
import tensorflow as tf

from tf_msemb.models.encoder import ensure_built
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
    """

    tokenizer: object = None
    total_steps: int = None
    global_batch_size: int = None


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

    @property
    def options(self):
        """The constructor's own arguments other than `encoder` and `run` (Keras' `**kwargs` excluded)."""
        return dict(self._constructor_options)

    @property
    def input_features(self):
        """`data.features.InputFeature`s the batches must carry beyond `src`/`tgt` tokens (none by default)."""
        return []

    def exports(self):
        """`{name: (tokenizer, encoder)}` of the models a run exports; `"encoder"` is the main one."""
        return {"encoder": (self.run.tokenizer, self.encoder)}

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
        """
        variables = self.trainable_variables if variables is None else variables
        gradients = tape.gradient(scaled_loss, variables)
        gradients = [_dense(g) for g in gradients]
        clip_norm = getattr(getattr(self.optimizer, "inner_optimizer", self.optimizer), "global_clipnorm", None)
        if clip_norm:
            # Gradients of a scaled loss (mixed_float16) are scaled too; so is the threshold.
            gradients = clip_summed_gradients(gradients, clip_norm * self.optimizer.scale_loss(1.0))
        self.optimizer.apply(gradients, variables)

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
