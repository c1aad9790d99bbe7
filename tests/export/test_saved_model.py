import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import l2_normalize
from conftest import needs_bfloat16

SENTENCES = ["Die Frau liest eine Zeitung im Park.", "The child waters the flowers.", "¿Dónde está la farmacia?"]


@pytest.fixture(scope="module")
def exported(tokenizer, tmp_path_factory):
    encoder = SentenceEncoder(
        tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32,
        max_sequence_length=tokenizer.max_length, pooling=["mean", "max", "first", "attention"], pooled_dim=12,
    )
    path = export_saved_model(tokenizer, encoder, str(tmp_path_factory.mktemp("export") / "m"))
    return path, encoder


def _keras_vectors(tokenizer, encoder, texts):
    return l2_normalize(encoder(tokenizer(tf.constant(texts)))).numpy()


def test_fresh_process_with_only_tf_and_tf_text_agrees(exported, tokenizer, tmp_path):
    path, encoder = exported
    out = tmp_path / "vectors.npy"
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import tensorflow as tf
        import tensorflow_text
        model = tf.saved_model.load({path!r})
        texts = tf.constant({SENTENCES!r})
        direct = model(texts).numpy()
        served = model.signatures["serving_default"](inputs=texts)["outputs"].numpy()
        assert np.array_equal(direct, served)
        assert "tf_msemb" not in sys.modules and "keras_hub" not in sys.modules
        np.save({str(out)!r}, direct)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=str(tmp_path))
    reloaded = np.load(out)
    expected = _keras_vectors(tokenizer, encoder, SENTENCES)
    assert reloaded.shape == (3, 12)
    assert np.abs(reloaded - expected).max() <= 1e-5


def test_signature_and_reusable_api(exported):
    path, encoder = exported
    model = tf.saved_model.load(path)
    signature = model.signatures["serving_default"]
    assert list(signature.structured_input_signature[1]) == ["inputs"]
    assert signature.structured_input_signature[1]["inputs"].dtype == tf.string
    output = signature.structured_outputs["outputs"]
    assert output.dtype == tf.float32 and output.shape.as_list() == [None, 12]
    assert len(model.trainable_variables) == len(encoder.trainable_variables)
    assert len(model.variables) == len(encoder.variables)
    assert list(model.regularization_losses) == []
    assert os.listdir(os.path.join(path, "assets")) == ["qs.model"]


def test_each_weight_is_saved_once_and_the_listed_variables_are_live(packed_exported, tokenizer):
    """`variables` must name the encoder's own variables: copies doubled the export's size."""
    path, encoder = packed_exported
    saved = tf.train.list_variables(os.path.join(path, "variables", "variables"))
    token_table = tuple(encoder.backbone.token_embedding.embeddings.shape)
    assert [tuple(shape) for _, shape in saved].count(token_table) == 1
    model = tf.saved_model.load(path)
    texts = tf.constant(SENTENCES)
    before = model(texts).numpy()
    for variable in model.trainable_variables:
        variable.assign(variable * 1.5)
    assert not np.allclose(model(texts).numpy(), before, atol=1e-3)


@pytest.mark.parametrize(
    "texts",
    [
        [""],
        ["   \t  "],
        ["lorem ipsum " * 8334],
        [b"\xff\xfe\xfa broken \xc3"],
        ["😀🎉👍"],
        ["Hello 世界 Привет мир مرحبا"],
        ["Der Zug fährt um acht Uhr ab."] * 1000,
    ],
    ids=["empty", "whitespace", "100k-chars", "invalid-utf8", "emoji", "mixed-scripts", "batch-1000"],
)
def test_bad_inputs_give_finite_unit_vectors(exported, texts):
    model = tf.saved_model.load(exported[0])
    vectors = model(tf.constant(texts, dtype=tf.string)).numpy()
    assert vectors.shape == (len(texts), 12)
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_empty_batch(exported):
    model = tf.saved_model.load(exported[0])
    assert model(tf.constant([], dtype=tf.string)).shape == (0, 12)
    served = model.signatures["serving_default"](inputs=tf.constant([], dtype=tf.string))["outputs"]
    assert served.shape == (0, 12)


def test_training_flag_reaches_dropout(tokenizer, tmp_path):
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length, dropout=0.5)
    model = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path / "m")))
    texts = tf.constant(SENTENCES)
    np.testing.assert_array_equal(model(texts), model(texts, training=False))
    assert not np.allclose(model(texts, training=True), model(texts, training=False))


def test_the_restored_call_serves_every_batch_size_and_mode_from_one_trace(exported):
    """Without an input signature the restored `__call__` traced (and optimized) a graph per new batch size."""
    model = tf.saved_model.load(exported[0])
    for size in (1, 3, 7, 2):
        model(tf.constant(SENTENCES[:1] * size))
    model(tf.constant(SENTENCES), training=True)
    assert model.__call__.experimental_get_tracing_count() == 1


def test_keras3_tfsmlayer_wraps_the_export(exported, tokenizer):
    import keras

    path, encoder = exported
    layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
    out = layer(tf.constant(SENTENCES))["outputs"].numpy()
    np.testing.assert_allclose(out, _keras_vectors(tokenizer, encoder, SENTENCES), atol=1e-5)


MIXED = ["Hi.", "", "Ein Mann spielt Gitarre auf einer Bühne vor vielen Leuten am Abend.", "The dog runs.",
         "Une femme lit.", "x " * 60, "Zwei Kinder.", "A"] * 3


@pytest.mark.slow
@pytest.mark.parametrize("sub_batch_size", [1, 4, 64])
def test_length_sorted_sub_batches_return_the_same_vectors_in_order(exported, tokenizer, sub_batch_size):
    from tf_msemb.export.saved_model import EmbeddingModule

    _, encoder = exported
    one_batch = EmbeddingModule(tokenizer, encoder, sub_batch_size=0)(tf.constant(MIXED)).numpy()
    sorted_parts = EmbeddingModule(tokenizer, encoder, sub_batch_size=sub_batch_size)(tf.constant(MIXED)).numpy()
    np.testing.assert_allclose(sorted_parts, one_batch, atol=1e-5)
    np.testing.assert_allclose(sorted_parts, _keras_vectors(tokenizer, encoder, MIXED), atol=1e-5)
    empty = EmbeddingModule(tokenizer, encoder, sub_batch_size=sub_batch_size)(tf.constant([], tf.string))
    assert empty.shape == (0, encoder.output_dim)


@needs_bfloat16
def test_bfloat16_export_stays_close_to_float32(exported, tokenizer, tmp_path):
    path, encoder = exported
    bf16 = export_saved_model(tokenizer, encoder, str(tmp_path / "bf16"), precision="mixed_bfloat16")
    full = tf.saved_model.load(path)(tf.constant(MIXED)).numpy()
    half = tf.saved_model.load(bf16)(tf.constant(MIXED)).numpy()
    assert half.dtype == np.float32
    cosines = (full * half).sum(axis=1)
    assert cosines.min() > 0.999 and not np.array_equal(full, half)
    metadata = json.loads((tmp_path / "bf16" / "tf_msemb_export.json").read_text())
    assert metadata["compute_precision"] == "mixed_bfloat16" and metadata["length_sorted_sub_batch"] == 32


@pytest.fixture(scope="module")
def packed_exported(tokenizer, tmp_path_factory):
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=2, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length)
    path = export_saved_model(tokenizer, encoder, str(tmp_path_factory.mktemp("packed") / "m"))
    return path, encoder


def test_packed_inference_is_the_default_and_agrees_with_keras_and_padded(packed_exported, tokenizer, tmp_path):
    path, encoder = packed_exported
    model = tf.saved_model.load(path)
    texts = tf.constant(MIXED)
    vectors = model(texts).numpy()
    np.testing.assert_array_equal(model.signatures["serving_default"](inputs=texts)["outputs"].numpy(), vectors)
    np.testing.assert_allclose(vectors, _keras_vectors(tokenizer, encoder, MIXED), atol=1e-5)
    padded = export_saved_model(tokenizer, encoder, str(tmp_path / "padded"), packed=False)
    np.testing.assert_allclose(tf.saved_model.load(padded)(texts).numpy(), vectors, atol=1e-5)
    assert json.loads(open(os.path.join(path, "tf_msemb_export.json")).read())["inference"] == "packed"
    assert json.loads((tmp_path / "padded" / "tf_msemb_export.json").read_text())["inference"] == "padded"
    assert model(tf.constant([], tf.string)).shape == (0, 16)


def test_encoders_that_cannot_be_packed_fall_back_to_padded(exported):
    """The module fixture pools with attention (among others): not packable."""
    metadata = json.loads(open(os.path.join(exported[0], "tf_msemb_export.json")).read())
    assert metadata["inference"] == "padded"


def test_a_layout_packing_cannot_read_falls_back_to_padded_with_a_warning(tokenizer, tmp_path, monkeypatch, caplog):
    """A keras-hub release that renamed a private sublayer attribute still exports (packing is on by default)."""
    from tf_msemb.models import packed_backbone

    monkeypatch.setitem(packed_backbone.ENCODER_SUBLAYERS, "attention", "_renamed_self_attention_layer")
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length)
    with caplog.at_level(logging.WARNING):
        path = export_saved_model(tokenizer, encoder, str(tmp_path / "m"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("padded batches" in w and "_renamed_self_attention_layer" in w for w in warnings), warnings
    assert json.loads((tmp_path / "m" / "tf_msemb_export.json").read_text())["inference"] == "padded"
    vectors = tf.saved_model.load(path)(tf.constant(MIXED)).numpy()
    np.testing.assert_allclose(vectors, _keras_vectors(tokenizer, encoder, MIXED), atol=1e-5)


@needs_bfloat16
def test_packed_bfloat16_export_stays_close_to_float32(packed_exported, tokenizer, tmp_path):
    path, encoder = packed_exported
    bf16 = export_saved_model(tokenizer, encoder, str(tmp_path / "bf16"), precision="mixed_bfloat16")
    full = tf.saved_model.load(path)(tf.constant(MIXED)).numpy()
    half = tf.saved_model.load(bf16)(tf.constant(MIXED)).numpy()
    cosines = (full * half).sum(axis=1)
    assert cosines.min() > 0.999 and not np.array_equal(full, half)
    metadata = json.loads((tmp_path / "bf16" / "tf_msemb_export.json").read_text())
    assert metadata["inference"] == "packed" and metadata["compute_precision"] == "mixed_bfloat16"


def test_side_by_side_streams_are_an_export_option_with_the_same_vectors(packed_exported, tokenizer, tmp_path):
    path, encoder = packed_exported
    default = tf.saved_model.load(path)(tf.constant(MIXED)).numpy()
    assert json.loads(open(os.path.join(path, "tf_msemb_export.json")).read())["packed_streams"] == 2
    for streams in (1, 3):
        other = export_saved_model(tokenizer, encoder, str(tmp_path / str(streams)), streams=streams)
        assert json.loads((tmp_path / str(streams) / "tf_msemb_export.json").read_text())["packed_streams"] == streams
        np.testing.assert_allclose(tf.saved_model.load(other)(tf.constant(MIXED)).numpy(), default, atol=1e-5)


def test_the_single_sentence_branch_is_an_export_option_with_the_same_vectors(packed_exported, tokenizer, tmp_path):
    path, encoder = packed_exported
    single = export_saved_model(tokenizer, encoder, str(tmp_path / "single"), single_sentence=True)
    assert json.loads(open(os.path.join(path, "tf_msemb_export.json")).read())["packed_single_sentence"] is False
    assert json.loads((tmp_path / "single" / "tf_msemb_export.json").read_text())["packed_single_sentence"] is True
    default, single = tf.saved_model.load(path), tf.saved_model.load(single)
    for text in MIXED:
        np.testing.assert_allclose(single(tf.constant([text])).numpy(), default(tf.constant([text])).numpy(), atol=1e-5)
    np.testing.assert_allclose(single(tf.constant(MIXED)).numpy(), default(tf.constant(MIXED)).numpy(), atol=1e-5)


@pytest.mark.parametrize("fixture", ["exported", "packed_exported"])
def test_one_thread_gives_the_same_vectors(fixture, request, tmp_path):
    path, _ = request.getfixturevalue(fixture)
    out = tmp_path / "one_thread.npy"
    script = textwrap.dedent(
        f"""
        import numpy as np
        import tensorflow as tf
        import tensorflow_text
        from tf_msemb.runtime import set_threads
        set_threads(intra_op=1, inter_op=1)
        assert tf.config.threading.get_intra_op_parallelism_threads() == 1
        np.save({str(out)!r}, tf.saved_model.load({path!r})(tf.constant({MIXED!r})).numpy())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=str(tmp_path))
    default = tf.saved_model.load(path)(tf.constant(MIXED)).numpy()
    np.testing.assert_allclose(np.load(out), default, atol=1e-5)


def test_internal_ops_lists_the_underscore_ops_a_graph_holds(tmp_path):
    """Building a graph with an internal op needs no kernel, so this runs on every CPU."""
    from tf_msemb.export.saved_model import internal_ops
    from tf_msemb.inference import onednn

    class Fused(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return onednn.layer_norm(x, tf.ones([4]), tf.zeros([4]), 1e-6)

    class Plain(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return tf.nn.l2_normalize(x, axis=-1)

    for name, module in (("fused", Fused()), ("plain", Plain())):
        tf.saved_model.save(module, str(tmp_path / name), signatures={"serving_default": module.__call__})
    assert internal_ops(str(tmp_path / "fused")) == ["_MklLayerNorm"]
    assert internal_ops(str(tmp_path / "plain")) == []


def test_an_int8_export_on_a_tensorflow_without_the_ops_stops_with_one_line_naming_the_fallback(
        tokenizer, monkeypatch, tmp_path):
    """The support check reads TensorFlow's op registry (building a probe graph could abort the process)."""
    from tf_msemb.inference import packed
    from tf_msemb.training.errors import one_line

    registered = packed.op_def_registry.get
    monkeypatch.setattr(packed.op_def_registry, "get", lambda op: None if op == "_QuantizedMatMul" else registered(op))
    packed.int8_support.cache_clear()
    try:
        reason = packed.int8_support().unsupported
        assert reason and "does not register _QuantizedMatMul" in reason
        encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                                  intermediate_dim=32, max_sequence_length=tokenizer.max_length)
        with pytest.raises(ValueError) as raised:
            export_saved_model(tokenizer, encoder, str(tmp_path / "m"), precision="int8", calibration_file="x.txt")
        line = one_line(raised.value)
        assert "\n" not in line and "--precision=mixed_bfloat16" in line
    finally:
        monkeypatch.undo()
        packed.int8_support.cache_clear()
