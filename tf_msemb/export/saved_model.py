"""Writing a SavedModel that maps raw strings to unit-length embeddings.

The result follows the TF-Hub conventions of mUSE:

    model = tf.saved_model.load(path)             # after `import tensorflow_text`
    model(tf.constant(["Hallo Welt", "hello world"]))          # [2, dim] float32
    model.signatures["serving_default"](inputs=...)["outputs"]  # TF Serving

It also exposes `variables`, `trainable_variables` and `regularization_losses`
(the reusable SavedModel API), so `hub.KerasLayer` can wrap it. Normalization
and tokenization run inside, pinned to the CPU; the tokenizer's model file is
copied into `assets/`.
"""

import tensorflow as tf

from tf_msemb.models.encoder import l2_normalize

INPUT_KEY = "inputs"
OUTPUT_KEY = "outputs"
_STRINGS = tf.TensorSpec([None], tf.string, name=INPUT_KEY)


class EmbeddingModule(tf.Module):
    """Tokenizer + encoder as one trackable object.

    Args:
        tokenizer: a `SubwordTokenizer` layer.
        encoder: tokens -> `[b, d]` (a `SentenceEncoder` or a teacher).
    """

    # Plain attributes rather than tf.Module's computed properties, so they
    # are saved and visible after `tf.saved_model.load`.
    variables = None
    trainable_variables = None

    def __init__(self, tokenizer, encoder, name=None):
        super().__init__(name=name)
        self.tokenizer = tokenizer
        self.encoder = encoder
        # One eager call creates any state still missing (weights, dropout
        # seeds) outside the traced functions, where saving can reach it.
        encoder(tokenizer(tf.constant([""])))
        self.variables = [v.value for v in encoder.variables]
        self.trainable_variables = [v.value for v in encoder.trainable_variables]
        self.regularization_losses = []
        asset = getattr(tokenizer, "model_file", None) or getattr(tokenizer, "vocabulary_file", None)
        self.tokenizer_asset = tf.saved_model.Asset(asset) if asset else None
        for training in (False, True):
            self.__call__.get_concrete_function(_STRINGS, training=training)

    def _embed(self, inputs, training):
        with tf.device("/cpu:0"):
            tokens = self.tokenizer(inputs)
        return l2_normalize(self.encoder(tokens, training=training))

    @tf.function
    def __call__(self, inputs, training=False):
        """`[b]` strings -> `[b, d]` unit vectors."""
        return self._embed(inputs, training)

    @tf.function(input_signature=[_STRINGS])
    def serve(self, inputs):
        """The `serving_default` signature: `inputs` -> `outputs`."""
        return {OUTPUT_KEY: self._embed(inputs, False)}


def export_saved_model(tokenizer, encoder, path):
    """Writes the SavedModel to `path` and returns `path`."""
    module = EmbeddingModule(tokenizer, encoder)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path
