"""Exports written as keras-hub presets (tools/export_keras_hub.py, export.keras_hub_preset), through their real
consumers: `keras_hub.models.TextEmbedder.from_preset` in a process that imports keras-hub alone, this package's
`load_pretrained`, and a preset keras-hub wrote itself as the start of a training run (`train.pretrained`)."""

import json
import os
import subprocess
import sys
import unicodedata

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import cli_env
from pretrained_checkpoints import FIXTURES
from pretrained_checkpoints import load_reference
from random_weights import scratch_encoder
from tf_msemb.export import keras_hub_preset
from tf_msemb.export.keras_hub_preset import write_keras_hub_preset
from tf_msemb.export.reload import keras_parts
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.text.normalize import normalize_text
from tf_msemb.text.tokenizers import SentencePieceTokenizer

# Accented, mixed-script, full-width, quotes and dashes, odd spaces, empty, one word, over-long.
SENTENCES = load_reference("xlm_roberta")["sentences"] + open(
    os.path.join(REPO, "tests", "fixtures", "parity_sentences.txt"), encoding="utf-8").read().splitlines() + [
    "ＦＵＬＬ－ＷＩＤＴＨ　ｔｅｘｔ", "«Zitat» – „Anführung“ ‐ ′Strich′", "Straße"]
# kind -> the fixture it starts from (None: the from-scratch encoder)
KINDS = {"minilm": "bert_wordpiece_uncased", "e5_small": "bert_sentencepiece", "xlm_roberta": "xlm_roberta",
         "distilbert": "distilbert", "scratch": None}
# Run in a fresh interpreter, as a keras-hub user does: the preset loaded and encoded with keras-hub alone.
CONSUMER = """
import json, sys
import keras_hub
directories, sentences, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
results = {}
for directory in directories:
    embedder = keras_hub.models.TextEmbedder.from_preset(directory)
    vectors = embedder.encode_text(sentences, verbose=0, batch_size=len(sentences))
    ids = embedder.preprocessor(sentences)["token_ids"]
    results[directory] = {"class": type(embedder).__name__, "vectors": vectors.tolist(), "ids": ids.numpy().tolist()}
assert not [m for m in sys.modules if m.startswith("tf_msemb")], "the preset must not need tf_msemb"
json.dump(results, open(out, "w"))
"""


def _scratch(spm_model):
    tokenizer = SentencePieceTokenizer(spm_model, max_length=40)
    return tokenizer, scratch_encoder(tokenizer)


def _parts(kind, spm_model):
    return _scratch(spm_model) if KINDS[kind] is None else load_pretrained(os.path.join(FIXTURES, KINDS[kind]))


# The slow run writes every kind through a SavedModel export (about 3.5 minutes on 2 cores for these three, all
# seven more); the default run writes multilingual-e5-small's kind from the Keras model (below).
CORE = ["minilm", "e5_small", "scratch"]


def _write_all(kinds, spm_model, root):
    """`({kind: (export, preset, report or the command's stdout)}, keras-hub's results for every preset)`."""
    written = {}
    for kind in kinds:
        tokenizer, encoder = _parts(kind, spm_model)
        export = export_saved_model(tokenizer, encoder, str(root / "exports" / kind))
        preset = str(root / "presets" / kind)
        if kind == "minilm":  # the command line, as users run it
            result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_keras_hub.py"),
                                     f"--model={export}", f"--output={preset}"], capture_output=True, text=True,
                                    env=cli_env())
            assert result.returncode == 0 and result.stderr.strip() == "", result.stderr[-3000:]
            report = result.stdout
        else:
            rebuilt_tokenizer, rebuilt_encoder, metadata = keras_parts(export)
            report = write_keras_hub_preset(rebuilt_tokenizer, rebuilt_encoder, preset, metadata=metadata)
        written[kind] = (export, preset, report)
    out = root / "results.json"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", CONSUMER, json.dumps([p for _, p, _ in written.values()]),
                             json.dumps(SENTENCES), str(out)], capture_output=True, text=True, cwd=root, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return written, json.loads(out.read_text())


@pytest.fixture(scope="module")
def core(spm_model, tmp_path_factory):
    return _write_all(CORE, spm_model, tmp_path_factory.mktemp("keras_hub_core"))


@pytest.fixture(scope="module")
def others(spm_model, tmp_path_factory):
    return _write_all([kind for kind in KINDS if kind not in CORE], spm_model, tmp_path_factory.mktemp("keras_hub"))


def _of(request, kind):
    """`(export, preset, report, keras-hub's result)` of `kind`."""
    written, results = request.getfixturevalue("core" if kind in CORE else "others")
    export, preset, report = written[kind]
    return export, preset, report, results[preset]


def _kinds(kinds):
    return [pytest.param(kind, marks=[pytest.mark.slow]) for kind in kinds]


def test_multilingual_e5_small_s_kind_is_written_as_keras_hub_splits_and_encodes_it(tmp_path):
    """BERT weights with XLM-R's SentencePiece into keras-hub's XLM-R classes: every probe sentence (accents,
    scripts, full-width, empty, over-long) split alike and encoded alike by the preset as keras-hub loads it."""
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, "bert_sentencepiece"))
    report = write_keras_hub_preset(tokenizer, encoder, str(tmp_path / "e5"))
    assert report["task"] == "XLMRobertaTextEmbedder" and report["differing"] == {}
    assert report["weights_cosine"] >= 0.9999 and report["cosine"] >= 0.9999
    assert not os.path.exists(str(tmp_path / "e5") + ".partial")


def _tokenized_alike(kind):
    """The sentences keras-hub's tokenizer must split as ours: for XLM-R's SentencePiece, all whose only whitespace
    is the space (ours splits at every Unicode space as Hugging Face's does); for the from-scratch
    model, those `normalize_text` leaves alone (keras-hub runs none); for uncased WordPiece (both fixtures), those
    that keras-hub's BertTokenizer (accents stripped, then NFKC case folding) and Hugging Face's (lower-cased,
    then accents stripped) bring to the same text."""
    if kind in ("e5_small", "xlm_roberta"):  # (SentencePiece's own space handling: other whitespace differs)
        return [s for s in SENTENCES if all(c == " " or not c.isspace() for c in s)]
    if kind == "scratch":
        normalized = [t.decode() for t in normalize_text(tf.constant(SENTENCES)).numpy()]
        return [s for s, n in zip(SENTENCES, normalized) if s == n]

    def strip_accents(text):
        return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")

    def nfkc_casefold(text):
        return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())

    # keras-hub strips accents, then case-folds (recomposing what NFD split); Hugging Face lower-cases, then strips.
    return [s for s in SENTENCES if nfkc_casefold(strip_accents(s)) == strip_accents(s.lower())]


@pytest.mark.parametrize("kind", _kinds(KINDS))
def test_keras_hub_alone_encodes_the_export_s_vectors(request, kind):
    export, preset, _, result = _of(request, kind)
    assert result["class"] == ("BertTextEmbedder" if kind in ("minilm", "distilbert") else "XLMRobertaTextEmbedder")
    vectors = np.array(result["vectors"], np.float32)
    expected = tf.saved_model.load(export)(tf.constant(SENTENCES)).numpy()
    # A dropped normalization keeps every cosine but not the unit length.
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    alike = _tokenized_alike(kind)
    assert len(alike) >= len(SENTENCES) // 2, alike  # (the check below sees most of the sentences)
    cosines = {s: float(c) for s, c in zip(SENTENCES, (vectors * expected).sum(1))}
    low = {s: c for s, c in cosines.items() if s in alike and c < 0.9999}
    assert not low, low


@pytest.mark.parametrize("kind", _kinds(KINDS))
def test_the_report_names_exactly_the_sentences_keras_hub_splits_otherwise(request, kind):
    _, _, report, _ = _of(request, kind)
    if kind == "minilm":  # the command line prints the report
        assert "min cosine 1.000000 over the probe sentences" in report
        assert "Wrote keras-hub preset (BertTextEmbedder)" in report and "splits otherwise" in report
        return
    assert report["weights_cosine"] >= 0.9999 and report["cosine"] >= 0.9999
    if kind in ("e5_small", "xlm_roberta", "scratch"):
        # XLM-R's SentencePiece, and the from-scratch model's reordered to it, split every probe as ours (the
        # scratch model's full-width probe only through normalize_text, which keras-hub does not run).
        assert list(report["differing"]) == (["ＦＵＬＬ－ＷＩＤＴＨ　ｔｅｘｔ １２３"] if kind == "scratch" else [])


@pytest.mark.parametrize("kind", _kinds(["minilm", "scratch", "distilbert"]))
def test_load_pretrained_reads_the_preset_back_to_keras_hub_s_vectors(request, kind):
    _, preset, _, result = _of(request, kind)
    tokenizer, encoder = load_pretrained(preset)
    assert encoder.normalize and encoder.pooling_spec == "mean"
    vectors = encoder(tokenizer(tf.constant(SENTENCES))).numpy()
    np.testing.assert_allclose(vectors, np.array(result["vectors"], np.float32), atol=1e-5)


@pytest.mark.slow
def test_the_card_says_how_keras_hub_loads_it_and_names_no_path_of_this_machine(request):
    export, preset, _, _ = _of(request, "e5_small")
    card = open(os.path.join(preset, "README.md"), encoding="utf-8").read()
    assert card.startswith("---\nlibrary_name: keras-hub\n")
    assert "XLMRobertaTextEmbedder" in card and "TextEmbedder.from_preset('e5_small')" in card
    for name in os.listdir(preset):
        path = os.path.join(preset, name)
        if os.path.isfile(path) and name.endswith((".json", ".md")):
            text = open(path, encoding="utf-8").read()
            assert str(REPO) not in text and os.path.dirname(export) not in text, name


def test_a_backbone_keras_hub_computes_otherwise_is_refused(monkeypatch, tmp_path):
    """The writer compares the stock model with the encoder on the same ids: a weight in the wrong layer stops it."""
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, "bert_wordpiece_uncased"))
    stock_backbone = keras_hub_preset._stock_backbone

    def swapped(backbone, vocabulary):
        stock = stock_backbone(backbone, vocabulary)
        first, second = stock.transformer_layers[:2]
        weights = first.get_weights()
        first.set_weights(second.get_weights())
        second.set_weights(weights)
        return stock

    monkeypatch.setattr(keras_hub_preset, "_stock_backbone", swapped)
    with pytest.raises(ValueError, match="computes other vectors than this encoder"):
        write_keras_hub_preset(tokenizer, encoder, str(tmp_path / "p"))
    assert not os.path.exists(tmp_path / "p")


def test_what_keras_hub_s_text_embedder_cannot_hold_is_refused_naming_it(spm_model, tmp_path):
    dense_tokenizer, dense = load_pretrained(os.path.join(FIXTURES, "bert_tokenizer_json"))
    with pytest.raises(ValueError, match="has layers after its pooling"):
        write_keras_hub_preset(dense_tokenizer, dense, str(tmp_path / "a"))
    prompted_tokenizer, prompted = load_pretrained(os.path.join(FIXTURES, "bert_sentencepiece"), prompt="query: ")
    with pytest.raises(ValueError, match="puts the prompt 'query: ' before every text"):
        write_keras_hub_preset(prompted_tokenizer, prompted, str(tmp_path / "b"))
    lower = SentencePieceTokenizer(spm_model, max_length=16, lowercase=True)
    keras.utils.set_random_seed(0)
    small = SentenceEncoder(lower.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32,
                            max_sequence_length=16)
    with pytest.raises(ValueError, match="lower-cases text before SentencePiece"):
        write_keras_hub_preset(lower, small, str(tmp_path / "c"))
    sqrt_len = SentenceEncoder(lower.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32,
                                max_sequence_length=16, pooling="mean_sqrt_len")
    with pytest.raises(ValueError, match="pooling .mean_sqrt_len. is no keras-hub TextEmbedder pooling_mode"):
        write_keras_hub_preset(lower, sqrt_len, str(tmp_path / "d"))


@pytest.fixture(scope="module")
def keras_hub_written(tmp_path_factory):
    """A small BERT TextEmbedder preset written by keras-hub itself (cls pooling, normalized, 24 tokens)."""
    keras.utils.set_random_seed(1)
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(
        set("abcdefghijklmnopqrstuvwxyzäöüéè.,!?") | {"##" + c for c in "abcdefghijklmnopqrstuvwxyzäöüéè"})
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(vocabulary), num_layers=2, num_heads=2,
                                             hidden_dim=16, intermediate_dim=32, max_sequence_length=32)
    task = keras_hub.models.BertTextEmbedder(
        backbone=backbone, preprocessor=keras_hub.models.BertTextEmbedderPreprocessor(tokenizer, sequence_length=24),
        pooling_mode="cls", normalize=True)
    directory = str(tmp_path_factory.mktemp("keras_hub_written") / "tiny_bert_embedder")
    task.save_to_preset(directory)
    return directory, task


def test_a_text_embedder_preset_loads_as_keras_hub_encodes_it(keras_hub_written):
    directory, task = keras_hub_written
    tokenizer, encoder = load_pretrained(directory)
    assert tokenizer.max_length == 24 and encoder.pooling_spec == "first" and encoder.normalize
    texts = ["Ein Hund läuft.", "", "a b c " * 20, "Élève!"]
    expected = task.predict(tf.constant(texts), verbose=0)
    np.testing.assert_allclose(encoder(tokenizer(tf.constant(texts))).numpy(), expected, atol=1e-5)


@pytest.mark.slow
def test_train_pretrained_starts_from_a_keras_hub_preset_and_exports_it_trained(keras_hub_written,
                                                                               quickstart_records, tmp_path):
    directory, task = keras_hub_written
    model_dir = tmp_path / "run"
    bindings = ["train.tokenizer = None", f"train.pretrained = '{directory}'",
                f"make_dataset.corpora = ['{quickstart_records}']", "make_dataset.max_tokens = 24",
                "train.global_batch_size = 8", "train.num_steps = 3", "train.log_every = 1", "train.evaluators = []",
                "make_optimizer.learning_rate = 1e-3", "make_optimizer.warmup_steps = 0"]
    result = subprocess.run([sys.executable, "-m", "tf_msemb.train", "--gin_file=configs/quickstart.gin",
                             f"--model_dir={model_dir}", *[f"--gin_param={b}" for b in bindings]],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    texts = ["ein hund läuft.", "a cat sits."]
    trained = tf.saved_model.load(str(model_dir / "export" / "final"))(tf.constant(texts)).numpy()
    start = task.predict(tf.constant(texts), verbose=0)
    np.testing.assert_allclose(np.linalg.norm(trained, axis=1), 1.0, atol=1e-5)
    # Trained (the vectors moved) from the preset's weights (they moved little: a fresh encoder's would be far).
    assert np.abs(trained - start).max() > 1e-4 and (trained * start).sum(1).min() > 0.9, (trained * start).sum(1)
    card = json.loads((model_dir / "export" / "final" / "tf_msemb_export.json").read_text())
    assert "tiny_bert_embedder" in json.dumps(card["provenance"])


def test_a_keras_hub_start_written_back_keeps_keras_hub_s_tokenizer_or_is_refused(keras_hub_written, tmp_path):
    directory, task = keras_hub_written
    tokenizer, encoder = load_pretrained(directory)
    report = write_keras_hub_preset(tokenizer, encoder, str(tmp_path / "again"))
    assert report["task"] == "BertTextEmbedder" and report["differing"] == {} and report["cosine"] >= 0.9999
    normalizing, encoder = load_pretrained(directory, text_normalization=True)
    with pytest.raises(ValueError, match="runs normalize_text before keras-hub's own tokenizer"):
        write_keras_hub_preset(normalizing, encoder, str(tmp_path / "normalizing"))
