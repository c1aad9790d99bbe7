"""An export loaded as TF Serving loads it: a v1 Session over the `serve` MetaGraph, called through `serving_default`."""

import contextlib

import tensorflow as tf


@contextlib.contextmanager
def serving_session(path):
    """Yields `run(sentences, options=None, metadata=None)` -> the signature's `[b, d]` output, for `path`'s export.

    The caller imports `tensorflow_text` first (the export's tokenizer ops).
    """
    tf.get_logger().setLevel("ERROR")  # the v1 loader's deprecation notice: it is TF Serving's loader, on purpose
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
        (inputs,), (outputs,) = signature.inputs.values(), signature.outputs.values()

        def run(sentences, options=None, metadata=None):
            return session.run(outputs.name, {inputs.name: sentences}, options=options, run_metadata=metadata)

        yield run
