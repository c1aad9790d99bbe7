"""TF Serving side of an export: Predict requests and the warm-up file inside the SavedModel.

TF Serving replays `assets.extra/tf_serving_warmup_requests` (a TFRecord of
`PredictionLog`s) when it loads a model version, so the first user request
does not pay for graph warm-up. The requests use the same builder as the
client in `export/client.py`.
"""

import os

import tensorflow as tf
from tensorflow_serving.apis import model_pb2
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_log_pb2

from tf_msemb.models.packed_backbone import FUSED_NORM_MIN_TOKENS

SIGNATURE = "serving_default"
INPUT_KEY = "inputs"
OUTPUT_KEY = "outputs"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# Short to long, so the warm-up touches several padded lengths and batch sizes.
WARMUP_SENTENCES = (
    "Hello.",
    "A man is playing a guitar.",
    "Zwei Hunde spielen im Schnee vor einem roten Haus.",
    "Une femme en veste bleue lit un journal sur un banc près de la rivière pendant que des enfants jouent.",
)


def predict_request(sentences, model_name="tf_msemb", signature_name=SIGNATURE, version=None):
    """A gRPC `PredictRequest` carrying `sentences` as the 1-D string input `inputs`."""
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name)
    )
    if version is not None:
        request.model_spec.version.value = int(version)
    request.inputs[INPUT_KEY].CopyFrom(tf.make_tensor_proto([s.encode("utf-8") for s in sentences], dtype=tf.string))
    return request


# The last warm-up request holds at least this many sentences, the warm-up ones in turn: a batch clients send.
WARMUP_BATCH = 64


def warmup_batches(sentences=WARMUP_SENTENCES, lengths=None, streams=1):
    """The warm-up requests' sentences: each prefix of `sentences` (batch sizes 1..n), then a large batch.

    The large batch takes every size-dependent branch of the graph, so a
    server that lacks a kernel fails at load, not on a user's long request:
    given `lengths` (tokens per sentence of `sentences`), it grows until each
    of `streams` side-by-side sub-batches (every `streams`-th sentence by
    length, `PackedEncoder`) holds `FUSED_NORM_MIN_TOKENS` tokens, where an
    int8 export's layer norms run fused.
    """

    def cycle(size):
        return [sentences[i % len(sentences)] for i in range(size)]

    def smallest_stream(size):
        ordered = sorted(lengths[i % len(sentences)] for i in range(size))
        return min(sum(ordered[stream::streams]) for stream in range(streams))

    size = WARMUP_BATCH
    while lengths is not None and smallest_stream(size) < FUSED_NORM_MIN_TOKENS:
        size += len(sentences)
    return [list(sentences[:prefix]) for prefix in range(1, len(sentences) + 1)] + [cycle(size)]


def write_warmup_requests(export_path, model_name="tf_msemb", sentences=WARMUP_SENTENCES, tokenizer=None, streams=1):
    """Writes a warm-up `PredictionLog` per batch of `warmup_batches` (sized with `tokenizer`); returns the file path."""
    lengths = None if tokenizer is None else tokenizer.tokenize(tf.constant(sentences)).row_lengths().numpy().tolist()
    path = os.path.join(export_path, WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for batch in warmup_batches(sentences, lengths, streams):
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=predict_request(batch, model_name))
            )
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(export_path):
    """The `PredictRequest`s of an export's warm-up file."""
    path = os.path.join(export_path, WARMUP_FILE)
    return [
        prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        for record in tf.data.TFRecordDataset(path)
    ]
