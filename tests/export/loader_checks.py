"""Loads an export the way one consumer does, in a process that has imported only TensorFlow and tensorflow-text.

    python loader_checks.py {session,gradients,hub,tfsm} EXPORT OUT.npz

Each check writes what the test compares to `OUT.npz` and fails (exit status
1) if the process imported `tf_msemb` or `keras_hub`: a consumer has neither.
"""

import os
import sys

if __name__ == "__main__":  # a consumer's process; importing it for SENTENCES must not change the tests' env
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401 -- registers the tokenizer ops

SENTENCES = ["Die Frau liest eine Zeitung im Park.", "The child waters the flowers.", "¿Dónde está la farmacia?",
             "Ein Hund.", "Une femme en veste bleue lit un journal sur un banc près de la rivière."]


def served(path, sentences=SENTENCES):
    """`serving_default`'s vectors, through `tf.saved_model.load`."""
    return tf.saved_model.load(path).signatures["serving_default"](inputs=tf.constant(sentences))["outputs"].numpy()


def session(path):
    """TF Serving's loader: a Session over the `serve` MetaGraph, then every warm-up request replayed through it."""
    from tensorflow_serving.apis import prediction_log_pb2

    expected = served(path)
    requests = [prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
                for record in tf.data.TFRecordDataset(os.path.join(path, "assets.extra", "tf_serving_warmup_requests"))]
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        meta_graph = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
        signature = meta_graph.signature_def["serving_default"]
        inputs, outputs = signature.inputs["inputs"].name, signature.outputs["outputs"].name
        vectors = sess.run(outputs, {inputs: SENTENCES})
        singles = np.concatenate([sess.run(outputs, {inputs: [sentence]}) for sentence in SENTENCES])
        warmup, ops_run = [], []
        for request in requests:
            metadata = tf.compat.v1.RunMetadata()
            warmup.append(sess.run(outputs, {inputs: tf.make_ndarray(request.inputs["inputs"])},
                                   options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                                   run_metadata=metadata))
            # A node's timeline label reads "name = OpType(inputs)".
            ops_run.append({node.timeline_label.split(" = ")[-1].split("(")[0]
                            for device in metadata.step_stats.dev_stats for node in device.node_stats})
    return {"vectors": vectors, "singles": singles, "expected": expected, "warmup_sizes": [len(w) for w in warmup],
            "warmup_norms": np.concatenate([np.linalg.norm(w, axis=1) for w in warmup]),
            "first_request_ops": np.array(sorted(ops_run[0])), "last_request_ops": np.array(sorted(ops_run[-1]))}


def gradients(path):
    """Gradients of a fixed projection of the restored `__call__`'s vectors, at `training=True` and `False`."""
    model = tf.saved_model.load(path)
    texts = tf.constant(SENTENCES)
    projection = np.random.RandomState(0).normal(size=served(path).shape).astype(np.float32)
    result = {"names": np.array([v.name for v in model.trainable_variables])}
    for training in (True, False):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(texts, training=training) * projection)
        grads = tape.gradient(loss, model.trainable_variables)
        result[f"missing_{training}"] = np.array([g is None for g in grads])
        for i, g in enumerate(grads):
            if g is not None:
                result[f"grad_{training}_{i}"] = tf.convert_to_tensor(g).numpy()
    # One sentence alone (a packed export's single-sentence branch).
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(texts[:1], training=False) * projection[:1])
    grads = tape.gradient(loss, model.trainable_variables)
    result["missing_single"] = np.array([g is None for g in grads])
    for i, g in enumerate(grads):
        if g is not None:
            result[f"grad_single_{i}"] = tf.convert_to_tensor(g).numpy()
    result["call"] = model(texts, training=False).numpy()
    result["expected"] = served(path)
    return result


def hub(path):
    """`hub.KerasLayer(trainable=True)` in a tf-keras model: its output, then one `fit` step."""
    import tensorflow_hub
    import tf_keras

    layer = tensorflow_hub.KerasLayer(path, trainable=True)
    model = tf_keras.Sequential([tf_keras.Input(shape=(), dtype=tf.string), layer, tf_keras.layers.Dense(2)])
    texts = tf.constant(SENTENCES)
    vectors = layer(texts).numpy()
    before = [w.numpy() for w in layer.trainable_weights]
    model.compile(optimizer=tf_keras.optimizers.SGD(0.5),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(texts, np.arange(len(SENTENCES)) % 2, batch_size=len(SENTENCES), epochs=1, verbose=0)
    moved = [not np.array_equal(b, w.numpy()) for b, w in zip(before, layer.trainable_weights)]
    return {"vectors": vectors, "expected": served(path), "moved": np.array(moved),
            "loss": np.array(history.history["loss"])}


def tfsm(path):
    """Keras 3 `TFSMLayer` over `serving_default`."""
    import keras

    layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
    return {"vectors": np.asarray(layer(tf.constant(SENTENCES))["outputs"]), "expected": served(path)}


def main(check, path, out):
    result = {"session": session, "gradients": gradients, "hub": hub, "tfsm": tfsm}[check](path)
    leaked = [name for name in ("tf_msemb", "keras_hub") if name in sys.modules]
    if leaked:
        raise SystemExit(f"error: the consumer process imported {', '.join(leaked)}")
    np.savez(out, **result)


if __name__ == "__main__":
    main(*sys.argv[1:])
