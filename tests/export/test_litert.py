"""export.litert and tools/export_litert.py: one .tflite file, raw strings in, the SavedModel's unit vectors out."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from pretrained_checkpoints import FIXTURES
from tf_msemb.export import litert
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.pretrained import load_pretrained

pytest.importorskip("ai_edge_litert", reason="the litert extra (ai-edge-litert) is not installed")

with open(os.path.join(FIXTURES, "xlm_roberta_reference.json"), encoding="utf-8") as f:
    PARITY = json.load(f)["sentences"]
# Empty, one word, longer than max_length, invalid UTF-8 (bytes the SavedModel repairs too).
EDGES = ["", "Hund", "lange " * 400, b"caf\xc3 \xff\xfe broken", b"\xed\xa0\x80 surrogate"]
STSB = os.path.join(REPO, "..", "shared", "data", "stsb_multi_mt")
MEDIAPIPE_PYTHON = os.environ.get("TF_MSEMB_MEDIAPIPE_PYTHON", os.path.join(REPO, ".venv-mediapipe", "bin", "python"))


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def scratch(tokenizer, tmp_path_factory):
    """A from-scratch SentencePiece model (normalize_text inside) with a random encoder: its SavedModel and files."""
    tf.keras.utils.set_random_seed(5)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length, pooling="mean")
    saved = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path_factory.mktemp("sm") / "m")))
    return {"tokenizer": tokenizer, "encoder": encoder, "saved": saved,
            "float32": litert.convert(tokenizer, encoder),
            "int8": litert.convert(tokenizer, encoder, quantization="dynamic_int8")}


def _saved_vectors(saved, texts):
    return saved(tf.constant(texts)).numpy()


def test_vectors_equal_the_savedmodel_s_one_at_a_time_and_batched(scratch):
    runner = litert.interpreter(scratch["float32"])
    expected = _saved_vectors(scratch["saved"], PARITY)
    batched = litert.encode(runner, PARITY)
    single = np.stack([litert.encode(runner, [text])[0] for text in PARITY])
    for got in (batched, single):
        # Values, not only cosines: a file without the final normalization fails here.
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)
        assert (got * expected).sum(axis=1).min() >= 0.9999


def test_edge_inputs_give_the_savedmodel_s_finite_unit_vectors(scratch):
    runner = litert.interpreter(scratch["float32"])
    got = litert.encode(runner, EDGES)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, _saved_vectors(scratch["saved"], EDGES), rtol=0, atol=2e-5)
    assert litert.encode(runner, []).shape[0] == 0
    # A fresh interpreter's first request of one text (the file's own input shape, so nothing is resized).
    np.testing.assert_allclose(litert.encode(litert.interpreter(scratch["float32"]), [PARITY[0]]),
                               _saved_vectors(scratch["saved"], [PARITY[0]]), rtol=0, atol=2e-5)


def test_int8_holds_int8_weights_and_stays_within_its_stated_cosine(scratch):
    float32 = litert.encode(litert.interpreter(scratch["float32"]), PARITY)
    int8 = litert.encode(litert.interpreter(scratch["int8"]), PARITY)
    cosines = (float32 * int8).sum(axis=1)
    assert cosines.min() >= 0.99  # the bound docs/on_device.md states for dynamic-range int8
    assert not np.allclose(int8, float32, atol=1e-6)  # really another graph
    # The largest weight (the token embeddings) is stored as int8 (TFLite leaves tensors under 1,024 values float).
    from ai_edge_litert import schema_py_generated as schema

    assert _largest_tensor_type(scratch["int8"]) == schema.TensorType.INT8
    assert _largest_tensor_type(scratch["float32"]) == schema.TensorType.FLOAT32
    assert len(scratch["int8"]) < len(scratch["float32"])


def _largest_tensor_type(content):
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
    weights = (schema.TensorType.FLOAT32, schema.TensorType.INT8)  # not the tokenizer's uint8 model bytes
    tensors = [t for g in model.subgraphs for t in g.tensors if t.type in weights and t.shape is not None]
    return max(tensors, key=lambda t: int(np.prod(t.shape))).type


def test_the_file_calls_only_tensorflow_text_s_ops_and_mediapipe_s_name_when_asked(scratch):
    assert litert.custom_ops(scratch["float32"]) == ["RaggedTensorToTensor", litert.SENTENCEPIECE_OP]
    renamed = litert.for_mediapipe(scratch["float32"])
    assert litert.custom_ops(renamed) == ["RaggedTensorToTensor", litert.MEDIAPIPE_SENTENCEPIECE_OP]


@pytest.mark.parametrize("name", ["xlm_roberta", "xlm_roberta_tokenizer_json"])
def test_an_xlm_r_checkpoint_with_its_prompt_equals_its_savedmodel(name, tmp_path):
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, name))
    saved = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path / "m")))
    got = litert.encode(litert.interpreter(litert.convert(tokenizer, encoder, output_dim=8)), PARITY + EDGES)
    expected = _unit(_saved_vectors(saved, PARITY + EDGES)[:, :8])
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    """A BERT WordPiece checkpoint (uncased: accents stripped, CJK spaced): its SavedModel and float32 file."""
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, "bert_wordpiece_uncased"))
    saved = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path_factory.mktemp("wp") / "m")))
    return {"saved": saved, "float32": litert.convert(tokenizer, encoder)}


def test_a_wordpiece_checkpoint_equals_its_savedmodel_and_is_refused_for_mediapipe(wordpiece):
    runner = litert.interpreter(wordpiece["float32"])
    texts = PARITY + EDGES[:3]
    expected = _saved_vectors(wordpiece["saved"], texts)
    for got in (litert.encode(runner, texts), np.stack([litert.encode(runner, [t])[0] for t in texts])):
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)
    # Invalid UTF-8: the SavedModel deletes some malformed bytes that the file makes [UNK]; unit vectors both.
    invalid = litert.encode(runner, EDGES[3:])
    assert np.isfinite(invalid).all()
    np.testing.assert_allclose(np.linalg.norm(invalid, axis=1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="MediaPipe's TextEmbedder has no kernels for FastWordpiece"):
        litert.for_mediapipe(wordpiece["float32"])


def test_a_wordpiece_word_limit_counts_characters_through_the_interpreter(tmp_path):
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, "bert_tokenizer_json"))  # 8 characters a word
    saved = tf.saved_model.load(export_saved_model(tokenizer, encoder, str(tmp_path / "m")))
    texts = ["Großteil größere Übergrößen", "ab\u2603cd Straße", "Großteile"] + PARITY[:4]
    got = litert.encode(litert.interpreter(litert.convert(tokenizer, encoder)), texts)
    np.testing.assert_allclose(got, _saved_vectors(saved, texts), rtol=0, atol=2e-5)


def _stsb_captions(per_language=40):
    """STS-b dev sentences in four scripts: Latin (de), Cyrillic (ru), Han (zh), kana and kanji (ja)."""
    texts = []
    for language in ("de", "ru", "zh", "ja"):
        with open(os.path.join(STSB, f"stsb-{language}-dev.csv"), encoding="utf-8", newline="") as f:
            texts += [row[0] for row, _ in zip(csv.reader(f), range(per_language))]
    return texts


@pytest.mark.skipif(not os.path.isdir(STSB), reason="../shared/data/stsb_multi_mt is absent")
@pytest.mark.parametrize("model", ["scratch", "wordpiece"])
def test_real_captions_in_four_scripts_equal_the_savedmodel(model, request):
    files = request.getfixturevalue(model)
    captions = _stsb_captions()
    got = litert.encode(litert.interpreter(files["float32"]), captions)
    assert (got * _saved_vectors(files["saved"], captions)).sum(axis=1).min() >= 0.9999


@pytest.mark.skipif(not os.path.exists(MEDIAPIPE_PYTHON), reason="no MediaPipe venv (.venv-mediapipe, or "
                    "TF_MSEMB_MEDIAPIPE_PYTHON)")
def test_mediapipe_s_text_embedder_gives_the_savedmodel_s_vectors(scratch, tmp_path):
    path = tmp_path / "embedder.tflite"
    path.write_bytes(litert.for_mediapipe(scratch["float32"]))
    texts = PARITY[:6] + ["", "lange " * 400]
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    subprocess.run([MEDIAPIPE_PYTHON, os.path.join(REPO, "tools", "benchmarks", "mediapipe_embed.py"), str(path),
                    str(tmp_path / "texts.json"), str(tmp_path / "vectors.npy")], check=True)
    got = np.load(tmp_path / "vectors.npy")
    np.testing.assert_allclose(got, _saved_vectors(scratch["saved"], texts), rtol=0, atol=2e-5)


def test_a_prompt_without_a_trailing_space_is_refused():
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, "xlm_roberta"), prompt="query:")
    with pytest.raises(ValueError, match="does not end in a space"):
        litert.convert(tokenizer, encoder)


def test_the_command_writes_a_checked_file_and_a_mistake_ends_in_one_error_line(export, tmp_path):
    output = tmp_path / "embedder.tflite"
    result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_litert.py"), f"--model={export}",
                             f"--output={output}", "--target=mediapipe"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # Quiet: no SentencePiece table-builder or TFLite delegate lines.
    assert "builder.cc" not in result.stderr and "XNNPACK" not in result.stderr, result.stderr
    assert "min cosine 1.0000" in result.stdout or "min cosine 0.9999" in result.stdout
    assert litert.custom_ops(output.read_bytes())[-1] == litert.MEDIAPIPE_SENTENCEPIECE_OP
    missing = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_litert.py"),
                              f"--model={tmp_path / 'nothing'}", f"--output={output}"], capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        missing.stderr.strip().splitlines()[-1]] and missing.stderr.startswith("error: ")
