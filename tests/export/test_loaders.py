"""The export contract through its real consumers, each in a fresh process with only TensorFlow and tensorflow-text.

Every inference path and precision an export can have: float32 packed (the
default) and padded, mixed_bfloat16 and, where this CPU runs oneDNN's int8
kernels, int8. The checks themselves are in `loader_checks.py`.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import BFLOAT16_MARKS
from conftest import INT8_MARKS
from tf_msemb.export.saved_model import METADATA_FILE
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.serving import WARMUP_BATCH
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.inference.int8_calibration import Int8Options
from tf_msemb.inference.packed import INT8_REQUIRED_OPS
from tf_msemb.quickstart import CORPUS_DIR

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loader_checks.py")
sys.path.insert(0, os.path.dirname(CHECKS))
from loader_checks import SENTENCES  # noqa: E402

EXPORTS = {
    "float32": {},
    "padded": {"packed": False},
    "mixed_bfloat16": {"precision": "mixed_bfloat16"},
    "int8": {"precision": "int8", "calibration_file": os.path.join(CORPUS_DIR, "train.en.txt")},
    "float32_single": {"single_sentence": True},
    "int8_single": {"precision": "int8", "calibration_file": os.path.join(CORPUS_DIR, "train.en.txt"),
                    "single_sentence": True},
    # The GELU output on a range per token: row maxima and a rescale that the other int8 export does not have.
    "int8_token": {"precision": "int8", "calibration_file": os.path.join(CORPUS_DIR, "train.en.txt"),
                   "int8": Int8Options(gelu_range="token")},
}
# Session and restored-function outputs of one graph: equal for float32 (the bound), and to rounding below.
SESSION_TOLERANCE = {"float32": 1e-6, "padded": 1e-6, "mixed_bfloat16": 1e-5, "int8": 1e-5, "float32_single": 1e-6,
                     # The batch branch is a called function, which a v1 Session runs without TensorFlow's oneDNN
                     # rewrites: attention's bfloat16 matmuls round otherwise (max difference 5.6e-3 measured).
                     "int8_single": 2e-2, "int8_token": 1e-5}
# float32 packed is the default export and int8 the one with internal ops; the others run with the slow tests.
SLOW = ("padded", "mixed_bfloat16", "float32_single", "int8_single", "int8_token")
PRECISIONS = [pytest.param(name, marks=(INT8_MARKS if name.startswith("int8") else
                                         BFLOAT16_MARKS if name == "mixed_bfloat16" else [])
                           + ([pytest.mark.slow] if name in SLOW else []))
              for name in EXPORTS]


@pytest.fixture(scope="module")
def encoder(tokenizer):
    """Two layers with dropout: `training=True` must differ from inference."""
    tf.keras.utils.set_random_seed(7)
    return SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32,
                           max_sequence_length=tokenizer.max_length, dropout=0.1)


@pytest.fixture(scope="module")
def bert():
    """A keras-hub BERT `Embedder` (tiny MiniLM-like fixture) and its WordPiece tokenizer; its pooler is frozen."""
    from pretrained_checkpoints import checkpoint

    from tf_msemb.models.pretrained import load_pretrained

    return load_pretrained(checkpoint("bert_wordpiece_uncased"))


@pytest.fixture(scope="module")
def exports(tokenizer, encoder, bert, tmp_path_factory):
    """`exports(precision, model="sentence_encoder")`: the path of that export, written on first use."""
    root, made = tmp_path_factory.mktemp("loaders"), {}
    models = {"sentence_encoder": (tokenizer, encoder), "bert": bert}

    def get(precision, model="sentence_encoder"):
        if (precision, model) not in made:
            made[precision, model] = export_saved_model(*models[model], str(root / f"{model}_{precision}"),
                                                        **EXPORTS[precision])
        return made[precision, model]

    return get


def _consume(check, path, tmp_path):
    out = tmp_path / f"{check}.npz"
    result = subprocess.run([sys.executable, CHECKS, check, path, str(out)], capture_output=True, text=True,
                            cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(np.load(out))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_tf_serving_session_loader_runs_the_signature_and_every_warmup_request(exports, precision, tmp_path):
    """TF Serving's `LoadSavedModel` path: failed with "Could not find variable" while Keras objects were tracked."""
    path = exports(precision)
    result = _consume("session", path, tmp_path)
    assert np.abs(result["vectors"] - result["expected"]).max() <= SESSION_TOLERANCE[precision]
    sizes = list(result["warmup_sizes"])
    assert sizes[:-1] == [1, 2, 3, 4] and sizes[-1] >= WARMUP_BATCH
    np.testing.assert_allclose(result["warmup_norms"], 1.0, rtol=1e-5)
    # Each sentence alone (the packed single-sentence branch) against the batch: the same vector in float32; below,
    # rounding that int8 activations can amplify.
    singles, batch = result["singles"], result["vectors"]
    if precision in ("float32", "padded", "float32_single"):
        assert np.abs(singles - batch).max() <= 1e-5
    else:
        assert (singles * batch).sum(axis=1).min() >= 0.99
    if precision.startswith("int8"):
        # The fused layer norm runs from 256 tokens per sub-batch: the last request takes it, a single sentence
        # (on either branch) does not, so a server without its kernel fails at warm-up rather than on a user's
        # long request.
        assert set(INT8_REQUIRED_OPS) <= set(result["last_request_ops"])
        assert set(result["first_request_ops"]) & set(INT8_REQUIRED_OPS) == {"_MklQuantizeV2", "_QuantizedMatMul"}


def _keras_gradients(tokenizer, encoder, projection, sentences=SENTENCES):
    """The gradients of the same loss through the Keras encoder at inference (float32, padded)."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(l2_normalize(encoder(tokenizer(tf.constant(sentences)), training=False)) * projection)
    return tape.gradient(loss, encoder.trainable_variables)


# Gradients at training=False against the float32 Keras forward's, relative to the largest: exact for float32 packed
# and padded and for int8 (whose gradient is that forward's, straight-through); bfloat16's gradient is its own
# bfloat16 forward's. Its worst variable measured 1.1-1.3 % with oneDNN's native bfloat16 (AMX) and 2.3-2.6 % in
# Eigen's emulation (ONEDNN_MAX_CPU_ISA=AVX2 TF_ENABLE_ONEDNN_OPTS=0); a missing or mis-scaled path is off by ~100 %.
GRADIENT_TOLERANCE = {"float32": 1e-5, "padded": 1e-5, "mixed_bfloat16": 4e-2, "int8": 1e-5, "float32_single": 1e-5,
                      "int8_single": 1e-5, "int8_token": 1e-5}


def _check_gradients(path, tokenizer, encoder, precision, tmp_path):
    result = _consume("gradients", path, tmp_path)
    names = list(result["names"])
    assert len(names) == len(encoder.trainable_variables)
    np.testing.assert_array_equal(result["call"], result["expected"])
    for training in (True, False):
        assert not result[f"missing_{training}"].any(), [n for n, m in zip(names, result[f"missing_{training}"]) if m]
        for i, name in enumerate(names):
            grad = result[f"grad_{training}_{i}"]
            assert np.isfinite(grad).all(), name
            assert np.abs(grad).max() > 0, f"{name} got a zero gradient at training={training}"
    projection = np.random.RandomState(0).normal(size=result["expected"].shape).astype(np.float32)
    for key, sentences in (("False", SENTENCES), ("single", SENTENCES[:1])):
        assert not result[f"missing_{key}"].any()
        grads = _keras_gradients(tokenizer, encoder, projection[:len(sentences)], sentences)
        expected = [tf.convert_to_tensor(grad).numpy() for grad in grads]
        scale = max(np.abs(grad).max() for grad in expected)
        for i, (name, want) in enumerate(zip(names, expected)):
            assert np.abs(result[f"grad_{key}_{i}"] - want).max() <= GRADIENT_TOLERANCE[precision] * scale, name


@pytest.mark.slow
@pytest.mark.parametrize("precision", PRECISIONS)
def test_gradients_reach_every_trainable_variable_through_the_restored_call(exports, tokenizer, encoder, precision,
                                                                             tmp_path):
    _check_gradients(exports(precision), tokenizer, encoder, precision, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("precision", [p for p in PRECISIONS if p.values[0] in ("mixed_bfloat16", "int8")])
def test_a_bert_export_below_float32_differentiates_past_its_frozen_pooler(exports, bert, precision, tmp_path):
    """The straight-through gradient's Keras forward also reads non-trainable weights (BERT's unused pooler)."""
    _check_gradients(exports(precision, "bert"), *bert, precision, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("precision", PRECISIONS)
def test_hub_keras_layer_fine_tunes_the_encoder(exports, encoder, precision, tmp_path):
    path = exports(precision)
    result = _consume("hub", path, tmp_path)
    np.testing.assert_allclose(result["vectors"], result["expected"], atol=1e-6)
    assert np.isfinite(result["loss"]).all()
    assert result["moved"].size == len(encoder.trainable_variables)
    assert result["moved"].all(), f"{(~result['moved']).sum()} of {result['moved'].size} weights did not move"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_keras3_tfsm_layer_serves_the_export(exports, precision, tmp_path):
    result = _consume("tfsm", exports(precision), tmp_path)
    np.testing.assert_allclose(result["vectors"], result["expected"], atol=1e-6)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_metadata_names_the_ops_beyond_stock_tensorflow_and_the_writer(exports, precision):
    with open(os.path.join(exports(precision), METADATA_FILE), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["tensorflow_version"] == tf.__version__
    assert metadata["required_ops"] == (sorted(INT8_REQUIRED_OPS) if precision.startswith("int8") else [])
    if precision.startswith("int8"):
        assert metadata["int8_calibration"]["gelu_range"] == ("token" if precision == "int8_token" else "tensor")


def test_the_inference_module_at_width_d_cuts_and_renormalizes_on_every_path(tokenizer, encoder):
    """In process, before saving: inference (packed, padded) at width 8 gives the full module's first 8
    dimensions, re-normalized; training calls (dropout) give unit rows of width 8."""
    from tf_msemb.export.saved_model import inference_module

    inputs = tf.constant(SENTENCES)
    for options in ({}, {"packed": False}):
        vectors = inference_module(tokenizer, encoder, **options)(inputs).numpy()
        cut = inference_module(tokenizer, encoder, output_dim=8, **options)
        expected = vectors[:, :8] / np.linalg.norm(vectors[:, :8], axis=1, keepdims=True)
        np.testing.assert_allclose(cut(inputs).numpy(), expected, atol=2e-6, err_msg=str(options))
        training = cut(inputs, training=True).numpy()
        assert training.shape == (len(SENTENCES), 8)
        np.testing.assert_allclose(np.linalg.norm(training, axis=1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_an_export_at_width_d_is_the_full_exports_first_d_dimensions_renormalized(exports, tokenizer, encoder,
                                                                                   tmp_path):
    """`output_dim` cuts inside the graph: through TF Serving's Session and TFSMLayer, the packed and padded paths
    alike, the vectors equal the full export's first d dimensions, re-normalized (not merely cut: unit rows)."""
    for precision in ("float32", "padded"):
        full = exports(precision)
        nested = export_saved_model(tokenizer, encoder, str(tmp_path / f"d8_{precision}"), output_dim=8,
                                    **EXPORTS[precision])
        for check in ("session", "tfsm"):
            whole = _consume(check, full, tmp_path)["vectors"]
            cut = _consume(check, nested, tmp_path)["vectors"]
            expected = whole[:, :8] / np.linalg.norm(whole[:, :8], axis=1, keepdims=True)
            assert cut.shape == (len(SENTENCES), 8)
            np.testing.assert_allclose(cut, expected, atol=2e-6, err_msg=f"{precision} {check}")
        with open(os.path.join(nested, METADATA_FILE), encoding="utf-8") as f:
            metadata = json.load(f)
        assert (metadata["embedding_dim"], metadata["full_embedding_dim"]) == (8, 16)
        with open(os.path.join(nested, "README.md"), encoding="utf-8") as f:
            assert "8 (the first 8 of the encoder's 16, re-normalized)" in f.read()
    with pytest.raises(ValueError, match="output_dim = 17"):
        export_saved_model(tokenizer, encoder, str(tmp_path / "d17"), output_dim=17)
