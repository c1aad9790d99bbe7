"""An export loaded as TF Serving loads it: a v1 Session over the `serve` MetaGraph, called through `serving_default`.

`define_flags` and `prepare` are what the Session tools (`profile_request.py`, `bench_batching.py`) share: the
export, the benchmark sentences and the intra-op threads.
"""

import contextlib

import tensorflow as tf
from absl import flags

from traffic import benchmark_sentences


def define_flags():
    """`--model`, `--input`, `--limit` and `--intra_op_threads`."""
    flags.DEFINE_string("model", None, "Export directory (a raw-string SavedModel).")
    flags.DEFINE_multi_string("input", [], "Text files of sentences (default: the quickstart English corpus).")
    flags.DEFINE_integer("limit", 5000, "Sentences taken from each input at most.")
    flags.DEFINE_integer("intra_op_threads", 0, "TensorFlow threads inside one op (0: default).")
    flags.mark_flag_as_required("model")


def prepare(values):
    """Sets the intra-op threads of the parsed flag `values`, registers the export's tokenizer ops; the benchmark
    sentences."""
    from tf_msemb.runtime import set_threads

    set_threads(values.intra_op_threads)
    import tensorflow_text  # noqa: F401 -- registers the export's tokenizer ops

    return benchmark_sentences(values.input, values.limit, 0)


@contextlib.contextmanager
def serving_session(path):
    """Yields `run(sentences, options=None, metadata=None)` -> the signature's `[b, d]` output, for `path`'s export."""
    tf.get_logger().setLevel("ERROR")  # the v1 loader's deprecation notice: it is TF Serving's loader, on purpose
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
        (inputs,), (outputs,) = signature.inputs.values(), signature.outputs.values()

        def run(sentences, options=None, metadata=None):
            return session.run(outputs.name, {inputs.name: sentences}, options=options, run_metadata=metadata)

        yield run
