"""LARS: layer-wise adaptive rate scaling (You et al. 2017), as used by seed 000.

For every variable `w` with gradient `g`, unless excluded by name:

    g <- g + weight_decay * w
    lr_w = lr * eta * ||w|| / ||g||      (1 when either norm is zero)

then heavy-ball momentum `v <- momentum * v + lr_w * g; w <- w - v`.
Biases and normalization parameters are excluded from both the decay and the
trust ratio, as in BYOL and SimCLR.
"""

import keras
from keras import ops

# Substrings of variable paths that skip weight decay and adaptation.
DEFAULT_EXCLUDE = ("bias", "gamma", "beta", "norm")


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

    def adapts(self, variable):
        """Whether `variable` gets weight decay and the trust ratio."""
        path = variable.path.lower()
        return not any(part in path for part in self.exclude)

    def update_step(self, gradient, variable, learning_rate):
        learning_rate = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        index = self._get_variable_index(variable)
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
