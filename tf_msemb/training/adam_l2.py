"""Adam with a coupled L2 penalty, as seed 003 trains EMS ("Adam ... weight decay of 0.00001", Sec. IV-C).

The penalty joins the gradient before Adam's moments, `g <- g + l2 * w`
(the L2 form of Adam's weight decay in Kingma & Ba's setting and in
PyTorch's `Adam(weight_decay=...)`), so it is rescaled per coordinate like
the loss gradient; AdamW (Loshchilov & Hutter) instead decays `w` outside
the moments.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tf_msemb")
class AdamL2(keras.optimizers.Adam):
    """`keras.optimizers.Adam` on `gradient + l2 * variable`, for every variable.

    Args:
        l2: the L2 coefficient added to each gradient.
        **kwargs: `keras.optimizers.Adam`'s arguments but `weight_decay` (decoupled).
    """

    def __init__(self, l2=1e-5, name="adam_l2", **kwargs):
        if kwargs.get("weight_decay"):
            raise ValueError("AdamL2 takes its coupled penalty as l2; weight_decay would add AdamW's decoupled one.")
        super().__init__(name=name, **kwargs)
        self.l2 = l2

    def update_step(self, gradient, variable, learning_rate):
        gradient = ops.cast(gradient, variable.dtype) + ops.cast(self.l2, variable.dtype) * variable
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        config["l2"] = self.l2
        return config
