"""The TF Serving side: signature, warm-up requests, models.config, and the REST/gRPC client."""

import http.server
import json
import os
import re
import subprocess
import sys
import threading
from concurrent import futures

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

from conftest import REPO
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.serving import WARMUP_BATCH
from tf_msemb.export.serving import WARMUP_SENTENCES
from tf_msemb.export.serving import read_warmup_requests
from tf_msemb.models.encoder import SentenceEncoder

sys.path.insert(0, os.path.join(REPO, "export"))
import client  # noqa: E402  (export/client.py is a script beside the package)

SENTENCES = ["Zwei Hunde spielen im Schnee.", "Two dogs play in the snow.", "Un chien."]


@pytest.fixture(scope="module")
def served(tokenizer, tmp_path_factory):
    """A tiny export (embedding dim 128, as the README's example) and its loaded `serving_default`."""
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=128, num_layers=1, num_heads=2,
                              intermediate_dim=64, max_sequence_length=tokenizer.max_length)
    path = export_saved_model(tokenizer, encoder, str(tmp_path_factory.mktemp("serving") / "1"))
    model = tf.saved_model.load(path)
    return path, model, model.signatures["serving_default"]


def _readme_block(name):
    text = open(os.path.join(REPO, "export", "README.md"), encoding="utf-8").read()
    return re.search(rf"<!-- {name} -->\n```\n(.*?)```\n<!-- /{name} -->", text, re.S).group(1)


def test_saved_model_cli_shows_the_documented_signature(served):
    path, _, _ = served
    command = [os.path.join(os.path.dirname(sys.executable), "saved_model_cli"), "show", "--dir", path,
               "--tag_set", "serve", "--signature_def", "serving_default"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == _readme_block("signature").strip()


def test_warmup_requests_parse_and_run_against_the_saved_model(served):
    path, model, signature = served
    requests = read_warmup_requests(path)
    assert [len(r.inputs["inputs"].string_val) for r in requests] == [1, 2, 3, 4, WARMUP_BATCH]
    for request in requests:
        assert request.model_spec.name == "tf_msemb" and request.model_spec.signature_name == "serving_default"
        inputs = tf.constant(tf.make_ndarray(request.inputs["inputs"]))
        outputs = signature(inputs=inputs)["outputs"].numpy()
        assert outputs.shape == (inputs.shape[0], 128)
        np.testing.assert_allclose(np.linalg.norm(outputs, axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(outputs, model(inputs).numpy(), atol=1e-6)


def test_models_config_parses_and_batching_config_obeys_the_servers_rule():
    from tensorflow_serving.config import model_server_config_pb2

    text = open(os.path.join(REPO, "export", "models.config"), encoding="utf-8").read()
    config = text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == ("tf_msemb", "/models/tf_msemb", "tensorflow")
    assert model.model_version_policy.latest.num_versions == 1
    batching = open(os.path.join(REPO, "export", "batching.config"), encoding="utf-8").read()
    maximum = int(re.search(r"max_batch_size \{ value: (\d+) \}", batching).group(1))
    allowed = [int(v) for v in re.findall(r"allowed_batch_sizes: (\d+)", batching)]
    # TF Serving refuses a config whose largest allowed batch size is not max_batch_size.
    assert not allowed or (allowed == sorted(allowed) and allowed[-1] == maximum)
    # The values export/README.md derives from its measured curve.
    readme = open(os.path.join(REPO, "export", "README.md"), encoding="utf-8").read()
    timeout = int(re.search(r"batch_timeout_micros \{ value: (\d+) \}", batching).group(1))
    assert f"**`max_batch_size` {maximum}**" in readme and f"**`batch_timeout_micros` {timeout:,}**" in readme


def test_rest_request_format():
    assert client.rest_request(["a", "b"]) == {"signature_name": "serving_default", "instances": ["a", "b"]}
    assert client.rest_url("http://h:8501/", "m") == "http://h:8501/v1/models/m:predict"
    assert client.rest_url("http://h:8501", "m", 7) == "http://h:8501/v1/models/m/versions/7:predict"


def test_rest_client_round_trip(served):
    _, model, signature = served
    seen = {}

    class PredictHandler(http.server.BaseHTTPRequestHandler):
        """TF Serving's REST Predict API (row format) on top of the loaded SavedModel."""

        def do_POST(self):
            seen["path"] = self.path
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            outputs = signature(inputs=tf.constant(body["instances"]))["outputs"].numpy()
            answer = json.dumps({"predictions": outputs.tolist()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), PredictHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        vectors = client.embed_rest(f"http://127.0.0.1:{server.server_port}", "tf_msemb", SENTENCES)
    finally:
        server.shutdown()
    assert seen["path"] == "/v1/models/tf_msemb:predict"
    np.testing.assert_allclose(vectors, model(tf.constant(SENTENCES)).numpy(), atol=1e-6)


def test_grpc_client_round_trip(served):
    import grpc
    from tensorflow_serving.apis import predict_pb2
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    _, model, signature = served
    seen = {}

    class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
        """TF Serving's gRPC Predict on top of the loaded SavedModel."""

        def Predict(self, request, context):
            seen["spec"] = (request.model_spec.name, request.model_spec.signature_name)
            inputs = tf.constant(tf.make_ndarray(request.inputs["inputs"]))
            response = predict_pb2.PredictResponse()
            response.outputs["outputs"].CopyFrom(tf.make_tensor_proto(signature(inputs=inputs)["outputs"]))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        vectors = client.embed_grpc(f"127.0.0.1:{port}", "tf_msemb", SENTENCES)
    finally:
        server.stop(None)
    assert seen["spec"] == ("tf_msemb", "serving_default")
    np.testing.assert_allclose(vectors, model(tf.constant(SENTENCES)).numpy(), atol=1e-6)


def test_client_command_line_needs_one_server_and_sentences():
    result = subprocess.run([sys.executable, os.path.join(REPO, "export", "client.py"), "hello"], capture_output=True,
                            text=True)
    assert result.returncode != 0
    assert "Give --rest=URL or --grpc=HOST:PORT (one of them) and at least one sentence." in result.stderr


@pytest.mark.parametrize("streams", [1, 2, 4])
def test_the_last_warmup_batch_gives_every_stream_enough_tokens_for_the_fused_norms(streams):
    from tf_msemb.export.serving import warmup_batches
    from tf_msemb.models.packed_backbone import FUSED_NORM_MIN_TOKENS

    lengths = [3, 7, 12, 25]  # short sentences, as a large vocabulary splits them
    batches = warmup_batches(lengths=lengths, streams=streams)
    assert [len(b) for b in batches[:-1]] == [1, 2, 3, 4]
    last = sorted(lengths[WARMUP_SENTENCES.index(s)] for s in batches[-1])
    assert len(last) >= WARMUP_BATCH
    assert min(sum(last[stream::streams]) for stream in range(streams)) >= FUSED_NORM_MIN_TOKENS
    assert len(warmup_batches()[-1]) == WARMUP_BATCH  # without a tokenizer: the batch clients send
