"""Heads placed on top of an encoder."""

import keras


@keras.saving.register_keras_serializable(package="tf_msemb")
class ProjectedEncoder(keras.Model):
    """An encoder followed by a learned linear map to `output_dim`.

    Used when a student's width differs from its teacher's (seed 001): the
    projection is part of the exported model, so exports live in the
    teacher's space.
    """

    def __init__(self, encoder, output_dim, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.output_dim = output_dim
        self.projection = keras.layers.Dense(output_dim, name="projection")

    def build(self, inputs_shape):
        if not self.encoder.built:
            self.encoder.build(inputs_shape)
        self.projection.build((None, self.encoder.output_dim))
        self.built = True

    def call(self, inputs, training=False):
        return keras.ops.cast(self.projection(self.encoder(inputs, training=training)), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder), output_dim=self.output_dim)
        return config

    @classmethod
    def from_config(cls, config):
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
