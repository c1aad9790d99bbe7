"""tf_msemb: multilingual sentence embeddings with Keras 3 / TensorFlow."""

__version__ = "0.1.0"
