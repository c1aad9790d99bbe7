"""Embeds sentences with a tf_msemb model served by TensorFlow Serving (REST or gRPC Predict API).

    python export/client.py --rest=http://localhost:8501 "Hallo Welt" "hello world"
    python export/client.py --grpc=localhost:8500 --model=tf_msemb "Hallo Welt" "hello world"

Prints one row per sentence (its embedding's first values) and the cosine of
the first two. As a library: `embed_rest(url, model, sentences)` and
`embed_grpc(target, model, sentences)` return a float32 `[n, dim]` array.
"""

import json
import sys
import urllib.request

import numpy as np
from absl import app
from absl import flags

from tf_msemb.export.serving import OUTPUT_KEY
from tf_msemb.export.serving import SIGNATURE
from tf_msemb.export.serving import predict_request


def rest_request(sentences, signature_name=SIGNATURE):
    """The JSON body of a REST Predict call (row format: one instance per sentence)."""
    return {"signature_name": signature_name, "instances": list(sentences)}


def rest_url(base_url, model_name, version=None):
    """`<base>/v1/models/<name>[/versions/<v>]:predict`."""
    path = f"/v1/models/{model_name}" + (f"/versions/{version}" if version is not None else "")
    return base_url.rstrip("/") + path + ":predict"


def embed_rest(base_url, model_name, sentences, version=None, timeout=30.0):
    """POSTs the sentences to TF Serving's REST API and returns their embeddings."""
    body = json.dumps(rest_request(sentences)).encode("utf-8")
    request = urllib.request.Request(rest_url(base_url, model_name, version), data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read().decode("utf-8"))
    if "error" in answer:
        raise RuntimeError(f"TF Serving answered with an error: {answer['error']}")
    return np.asarray(answer["predictions"], dtype=np.float32)


def embed_grpc(target, model_name, sentences, version=None, timeout=30.0):
    """Calls `PredictionService/Predict` at `target` (`host:port`) and returns the embeddings."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(predict_request(sentences, model_name, version=version), timeout=timeout)
    return tf.make_ndarray(response.outputs[OUTPUT_KEY]).astype(np.float32)


FLAGS = flags.FLAGS


def define_flags():
    """Command-line flags, defined only when run as a script (importing the module defines none)."""
    flags.DEFINE_string("rest", None, "REST base URL of the model server, e.g. http://localhost:8501.")
    flags.DEFINE_string("grpc", None, "gRPC address of the model server, e.g. localhost:8500.")
    flags.DEFINE_string("model", "tf_msemb", "Model name in the server's models.config.")
    flags.DEFINE_integer("version", None, "A specific model version (default: the server's choice).")


def main(argv):
    sentences = argv[1:]
    if not sentences or (FLAGS.rest is None) == (FLAGS.grpc is None):
        raise app.UsageError("Give --rest=URL or --grpc=HOST:PORT (one of them) and at least one sentence.")
    if FLAGS.rest:
        vectors = embed_rest(FLAGS.rest, FLAGS.model, sentences, FLAGS.version)
    else:
        vectors = embed_grpc(FLAGS.grpc, FLAGS.model, sentences, FLAGS.version)
    for sentence, vector in zip(sentences, vectors):
        print(f"{sentence}\t[{', '.join(f'{v:.4f}' for v in vector[:4])}, ...] dim {vector.shape[0]}")
    if len(sentences) > 1:
        print(f"cosine(first, second) = {float(vectors[0] @ vectors[1]):.4f}")


if __name__ == "__main__":
    define_flags()
    sys.exit(app.run(main))
