"""Exports written as sentence-transformers directories (tools/export_hf.py, export.st_directory), through their
real consumers: `SentenceTransformer(dir).encode`, transformers' `AutoTokenizer` / `AutoModel` (st_consumer.py, in
a process of its own) and this package's `load_pretrained`."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import cli_env
from pretrained_checkpoints import FIXTURES
from pretrained_checkpoints import load_reference
from random_weights import scratch_encoder
from tf_msemb.export.reload import keras_parts
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.st_directory import write_sentence_transformers
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.models.heads import PrincipalAxes
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.text.tokenizers import SentencePieceTokenizer

CONSUMER = os.path.join(REPO, "tools", "benchmarks", "st_consumer.py")
# Accented, mixed-script, full-width, quotes and dashes, odd spaces, empty, one word, over-long (the fixtures'
# reference sentences), and the SavedModel parity sentences.
SENTENCES = load_reference("xlm_roberta")["sentences"] + open(
    os.path.join(REPO, "tests", "fixtures", "parity_sentences.txt"), encoding="utf-8").read().splitlines() + [
    "ＦＵＬＬ－ＷＩＤＴＨ　ｔｅｘｔ", "«Zitat» – „Anführung“ ‐ ′Strich′", "soft\u00adhyphen  two  spaces"]
# kind -> (how the export is made, what it stands for)
KINDS = {
    "minilm": "a BERT WordPiece start (all-MiniLM-L6-v2's kind)",
    "e5_small": "a BERT with XLM-R's SentencePiece (multilingual-e5-small's kind)",
    "e5_small_normalized": "the same with text_normalization (seed 000's recipes)",
    "e5_small_axes": "the same turned onto its principal axes (tools/principal_axes.py), normalized before the turn",
    "xlm_roberta": "XLM-R",
    "distilbert": "DistilBERT",
    "dense_cased": "a cased tokenizer.json WordPiece, cls+mean pooling and a Dense module",
    "prompted_unigram": "XLM-R's tokenizer.json alone, a default prompt",
    "scratch": "the from-scratch encoder with its SentencePiece vocabulary",
    "scratch_lower_cut": "from scratch, lower-cased, a prompt, cls+mean pooling, a Matryoshka cut to 16",
}
FIXTURE_OF = {"minilm": "bert_wordpiece_uncased", "e5_small": "bert_sentencepiece", "e5_small_axes": "bert_sentencepiece",
              "e5_small_normalized": "bert_sentencepiece", "xlm_roberta": "xlm_roberta", "distilbert": "distilbert",
              "dense_cased": "bert_tokenizer_json", "prompted_unigram": "xlm_roberta_tokenizer_json"}


def _scratch(spm_model, lowercase):
    tokenizer = SentencePieceTokenizer(spm_model, max_length=40, lowercase=lowercase,
                                       prompt="query: " if lowercase else "")
    return tokenizer, scratch_encoder(tokenizer, pooling="first+mean" if lowercase else "mean")


def _parts(kind, spm_model):
    if kind.startswith("scratch"):
        return _scratch(spm_model, lowercase=kind == "scratch_lower_cut")
    if kind == "e5_small_axes":
        tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, FIXTURE_OF[kind]))
        axes = PrincipalAxes(encoder)
        # The fixture's own vectors of varied text: an R far from the identity, so a dropped turn shows.
        axes.adapt(encoder(tokenizer(tf.constant(SENTENCES * 2 + [s[::-1] for s in SENTENCES]))).numpy())
        return tokenizer, axes
    return load_pretrained(os.path.join(FIXTURES, FIXTURE_OF[kind]), text_normalization=kind.endswith("normalized"))


# The default run writes these (the command line, multilingual-e5-small's kind, the from-scratch encoder with
# every option); the slow run the rest.
CORE = ["minilm", "e5_small", "e5_small_axes", "scratch_lower_cut"]
OTHERS = [kind for kind in KINDS if kind not in CORE]


def _write_all(kinds, spm_model, root, broken=False):
    """`({kind: (export, directory)}, the consumer's results for every directory)`; with `broken`, also a copy of the
    first directory that lacks one tensor, as `"broken"`."""
    written = {}
    for kind in kinds:
        tokenizer, encoder = _parts(kind, spm_model)
        export = export_saved_model(tokenizer, encoder, str(root / "exports" / kind),
                                    output_dim=16 if kind == "scratch_lower_cut" else None)
        directory = str(root / "st" / kind)
        if kind == "minilm":  # the command line, as users run it
            result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_hf.py"), f"--model={export}",
                                     f"--output={directory}"], capture_output=True, text=True, env=cli_env())
            assert result.returncode == 0, result.stderr[-3000:]
            assert "min cosine 1.0000" in result.stdout and result.stderr.strip() == "", result.stderr[-2000:]
        else:
            rebuilt_tokenizer, rebuilt_encoder, metadata = keras_parts(export)
            write_sentence_transformers(rebuilt_tokenizer, rebuilt_encoder, directory,
                                        output_dim=16 if kind == "scratch_lower_cut" else None, metadata=metadata,
                                        source=export)
        written[kind] = (export, directory)
    directories = [directory for _, directory in written.values()]
    if broken:  # the consumer's warning check must see a missing tensor
        from safetensors.numpy import load_file
        from safetensors.numpy import save_file

        copy = str(root / "st" / "broken")
        shutil.copytree(directories[0], copy)
        tensors = load_file(os.path.join(copy, "model.safetensors"))
        del tensors["encoder.layer.1.output.dense.bias"]
        save_file(tensors, os.path.join(copy, "model.safetensors"), metadata={"format": "pt"})
        written["broken"] = (None, copy)
        directories.append(copy)
    requests, results = root / "requests.json", root / "results.json"
    requests.write_text(json.dumps({"sentences": SENTENCES, "directories": directories}))
    result = subprocess.run([sys.executable, CONSUMER, str(requests), str(results)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return written, json.loads(results.read_text())


@pytest.fixture(scope="module")
def core(spm_model, tmp_path_factory):
    return _write_all(CORE, spm_model, tmp_path_factory.mktemp("st_core"), broken=True)


@pytest.fixture(scope="module")
def others(spm_model, tmp_path_factory):
    return _write_all(OTHERS, spm_model, tmp_path_factory.mktemp("st_others"))


def _of(request, kind):
    """`(export, directory, the consumer's result)` of `kind`."""
    written, results = request.getfixturevalue("core" if kind in CORE + ["broken"] else "others")
    export, directory = written[kind]
    return export, directory, results[directory]


def _kinds(kinds):
    return [pytest.param(kind, marks=[] if kind in CORE else [pytest.mark.slow]) for kind in kinds]


def _exported(export):
    return tf.saved_model.load(export)(tf.constant(SENTENCES)).numpy()


@pytest.mark.parametrize("kind", _kinds(KINDS))
def test_sentence_transformers_encodes_the_export_s_vectors(request, kind):
    export, directory, result = _of(request, kind)
    vectors = np.array(result["vectors"], np.float32)
    expected = _exported(export)
    assert vectors.shape == expected.shape
    cosine = (vectors * expected).sum(1) / np.linalg.norm(vectors, axis=1)
    assert cosine.min() >= 0.9999, [SENTENCES[i] for i in np.argsort(cosine)[:3]]
    if kind == "scratch_lower_cut":
        assert result["truncate_dim"] == 16  # the first 16 of the Normalize module's unit vectors
    else:  # a dropped Normalize module would keep the cosines but not the unit length
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(vectors, expected, atol=1e-5)


@pytest.mark.parametrize("kind", _kinds(KINDS))
def test_transformers_tokenizes_as_the_export_and_loads_without_warnings(request, kind):
    export, _, result = _of(request, kind)
    tokenizer, _, _ = keras_parts(export)
    assert result["ids"] == tokenizer.tokenize(tf.constant(SENTENCES)).to_list()
    assert result["log"] == "" and result["warnings"] == []


def test_a_missing_tensor_is_what_the_warning_check_sees(request):
    _, _, result = _of(request, "broken")
    assert "encoder.layer.1.output.dense.bias" in result["log"]


@pytest.mark.parametrize("kind", _kinds(["minilm", "e5_small_axes", "scratch_lower_cut", "dense_cased", "prompted_unigram"]))
def test_load_pretrained_reads_the_directory_back_to_the_same_vectors(request, kind):
    export, directory, _ = _of(request, kind)
    tokenizer, encoder = load_pretrained(directory)
    vectors = encoder(tokenizer(tf.constant(SENTENCES))).numpy()
    if kind == "scratch_lower_cut":  # load_pretrained keeps every dimension; the export kept the first 16
        vectors = vectors[:, :16]
    np.testing.assert_allclose(l2_normalize(vectors).numpy(), _exported(export), atol=1e-5)


def test_the_card_names_the_modules_and_no_path_of_this_machine(request):
    export, directory, _ = _of(request, "scratch_lower_cut")
    card = open(os.path.join(directory, "README.md"), encoding="utf-8").read()
    assert card.startswith("---\nlibrary_name: sentence-transformers\n")
    assert "BertModel" in card and "truncate_dim` 16" in card and "query: " in card
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and name.endswith((".json", ".md", ".gin")):
            text = open(path, encoding="utf-8").read()
            assert str(REPO) not in text and os.path.dirname(export) not in text, name


def test_an_export_whose_metadata_does_not_match_its_weights_is_refused(export, tmp_path):
    """The rebuilt model is checked against the export itself before anything is written."""
    copy = tmp_path / "model"
    shutil.copytree(export, copy)
    metadata_file = copy / "tf_msemb_export.json"
    metadata = json.loads(metadata_file.read_text())
    metadata["encoder"]["config"]["pooling"] = "max"
    metadata_file.write_text(json.dumps(metadata))
    result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_hf.py"), f"--model={copy}",
                             f"--output={tmp_path / 'st'}"], capture_output=True, text=True, env=cli_env())
    assert result.returncode == 1 and "Traceback" not in result.stderr
    # (tensorflow-text's SentencePiece op logs a line of its own as it loads an identity-normalizing model)
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"error: {copy}: the model rebuilt from its metadata gives other vectors than the export (cosine ")
    assert not (tmp_path / "st").exists()


def test_what_has_no_sentence_transformers_form_is_refused_naming_it(tokenizer, tmp_path):
    keras.utils.set_random_seed(0)
    attention = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                                intermediate_dim=32, max_sequence_length=tokenizer.max_length, pooling="attention")
    with pytest.raises(ValueError, match="pooling 'attention' has no sentence-transformers Pooling mode"):
        write_sentence_transformers(tokenizer, attention, str(tmp_path / "a"))
    roberta_tokenizer, roberta = load_pretrained(os.path.join(FIXTURES, "roberta"))
    with pytest.raises(ValueError, match="ByteLevelBPETokenizer is not written as Hugging Face tokenizer files"):
        write_sentence_transformers(roberta_tokenizer, roberta, str(tmp_path / "b"))


@pytest.mark.parametrize("name", ["bert_wordpiece_uncased", "distilbert", "xlm_roberta", "roberta"])
def test_the_transformers_checkpoint_reads_back_to_the_same_token_states(name, tmp_path):
    """Every architecture's weights as written, read by `hf_checkpoint` (checked against transformers by the
    fixtures): RoBERTa's too, whose two-file tokenizer no directory is written with."""
    from safetensors.numpy import save_file

    from tf_msemb.export.transformers_weights import transformers_checkpoint
    from tf_msemb.models.hf_checkpoint import load_backbone

    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, name))
    config, tensors = transformers_checkpoint(encoder.backbone, pad_token_id=tokenizer.pad_id)
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    features = tokenizer(tf.constant(SENTENCES[:12]))
    again = type(encoder)(load_backbone(str(tmp_path)), pooling=encoder.pooling_spec, normalize=encoder.normalize)
    np.testing.assert_allclose(again(features).numpy(), encoder(features).numpy(), atol=1e-5)


def test_a_training_run_s_card_holds_its_recipe_and_dev_figures(export, tmp_path):
    tokenizer, encoder, metadata = keras_parts(export)
    metadata = metadata | {"training_step": 200, "objective": {"class": "TranslationRanking"}, "provenance": {
        "kind": "training", "gin_files": ["configs/quickstart.gin"], "gin_params": [], "num_steps": 200,
        "global_batch_size": 32, "data": [], "dev_results": [{"step": 100, "retrieval/mean_recall@1": 0.5},
                                                               {"step": 200, "retrieval/mean_recall@1": 0.625}]}}
    directory = write_sentence_transformers(tokenizer, encoder, str(tmp_path / "run_st"), metadata=metadata)
    card = open(os.path.join(directory, "README.md"), encoding="utf-8").read()
    assert "| recipe | configs/quickstart.gin |" in card and "| objective | TranslationRanking |" in card
    assert "| 100 | 0.5000 |" in card and "| 200 | 0.6250 |" in card
    assert not os.path.exists(directory + ".partial")
