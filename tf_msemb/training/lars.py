"""LARS: layer-wise adaptive rate scaling (You et al. 2017), as used by seed 000.

For every variable `w` with gradient `g`, unless excluded by name:

    g <- g + weight_decay * w
    lr_w = lr * eta * ||w|| / ||g||      (1 when either norm is zero)

then heavy-ball momentum `v <- momentum * v + lr_w * g; w <- w - v`.
Biases and normalization parameters are excluded from both the decay and the
trust ratio, as in BYOL and SimCLR.

A variable's velocity is found with Keras' private `_get_variable_index`
(what Keras' own optimizers use; it knows every variable a distribution
strategy passes). A Keras release without it gets, with a warning, this
module's own lookup (`_slot_keys`): the same update, the same results.
"""

import keras
import tensorflow as tf
from absl import logging
from keras import ops

# Substrings of variable paths that skip weight decay and adaptation.
DEFAULT_EXCLUDE = ("bias", "gamma", "beta", "norm")


def _slot_keys(variables):
    """`{id: index}` of every object `update_step` may receive for `variables[index]`.

    That is the Keras variable itself or, on TensorFlow, the `tf.Variable`
    behind it and each replica's copy of a distributed one (Keras' TensorFlow
    optimizer updates those).
    """
    keys = {}
    for index, variable in enumerate(variables):
        objects = [variable]
        if keras.backend.backend() == "tensorflow":
            value = variable.value if isinstance(variable, keras.Variable) else variable
            objects += [value, *tf.distribute.get_strategy().experimental_local_results(value)]
        keys.update(dict.fromkeys(map(id, objects), index))
    return keys


@keras.saving.register_keras_serializable(package="tf_msemb")
class LARS(keras.optimizers.Optimizer):
    """Keras 3 LARS optimizer.

    Args:
        learning_rate: float or schedule.
        momentum: heavy-ball momentum.
        weight_decay_rate: L2 coefficient added to the gradient (coupled,
            before the trust ratio; not Keras' decoupled `weight_decay`).
        eta: trust coefficient.
        nesterov: Nesterov momentum.
        exclude: path substrings of variables that get neither decay nor adaptation.
    """

    def __init__(
        self,
        learning_rate=0.02,
        momentum=0.9,
        weight_decay_rate=1e-6,
        eta=0.001,
        nesterov=False,
        exclude=DEFAULT_EXCLUDE,
        name="lars",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = momentum
        self.weight_decay_rate = weight_decay_rate
        self.eta = eta
        self.nesterov = nesterov
        self.exclude = tuple(exclude)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.velocities = self.add_optimizer_variables(variables, "velocity")
        self._adapted = [self.adapts(v) for v in variables]
        self._slots = None if hasattr(self, "_get_variable_index") else _slot_keys(variables)
        if self._slots is not None:
            logging.warning("%s: Keras %s's optimizers have no _get_variable_index; LARS finds each variable's "
                            "velocity itself (same update).", self.name, keras.__version__)

    def adapts(self, variable):
        """Whether `variable` gets weight decay and the trust ratio."""
        path = variable.path.lower()
        return not any(part in path for part in self.exclude)

    def update_step(self, gradient, variable, learning_rate):
        learning_rate = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        index = self._slot_index(variable)
        if self._adapted[index]:
            gradient = gradient + ops.cast(self.weight_decay_rate, variable.dtype) * variable
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            g_norm = ops.sqrt(ops.sum(ops.square(gradient)))
            trust = ops.where(
                (w_norm > 0) & (g_norm > 0), self.eta * w_norm / ops.maximum(g_norm, 1e-30), 1.0
            )
            learning_rate = learning_rate * ops.cast(trust, variable.dtype)
        velocity = self.velocities[index]
        momentum = ops.cast(self.momentum, variable.dtype)
        self.assign(velocity, momentum * velocity + learning_rate * gradient)
        if self.nesterov:
            self.assign_sub(variable, momentum * velocity + learning_rate * gradient)
        else:
            self.assign_sub(variable, velocity)

    def _slot_index(self, variable):
        """The position of `variable` in the built variable list (its velocity's and `_adapted`'s)."""
        if self._slots is None:
            return self._get_variable_index(variable)
        if id(variable) not in self._slots:
            raise ValueError(f"LARS cannot find the velocity of {variable.name} under this distribution strategy: "
                             f"Keras {keras.__version__} lacks Optimizer._get_variable_index, which does; "
                             "install a Keras 3 release that has it.")
        return self._slots[id(variable)]

    def get_config(self):
        config = super().get_config()
        config.update(
            momentum=self.momentum,
            weight_decay_rate=self.weight_decay_rate,
            eta=self.eta,
            nesterov=self.nesterov,
            exclude=list(self.exclude),
        )
        return config
