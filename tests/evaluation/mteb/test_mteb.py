"""MTEB on exports (evaluation.mteb): scores by MTEB's own task classes against hand computations, prompts by
task, the command line with its results folder, and parity with sentence-transformers run by MTEB's own wrapper."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("mteb", reason="the mteb extra is not installed")

from conftest import REPO  # noqa: E402
from conftest import SHARED_DATA  # noqa: E402
from pretrained_checkpoints import checkpoint  # noqa: E402
from tf_msemb.evaluation.mteb import run as mteb_run  # noqa: E402
from tf_msemb.evaluation.encoding import load_model  # noqa: E402
from tf_msemb.evaluation.mteb.encoder import ExportEncoder  # noqa: E402
from tf_msemb.evaluation.mteb.tasks import local_bitext_mining  # noqa: E402
from tf_msemb.evaluation.mteb.tasks import local_sts  # noqa: E402
from tf_msemb.evaluation.mteb.tasks import task_from_spec  # noqa: E402
from tf_msemb.evaluation.mteb.tasks import task_spec  # noqa: E402

# Lengths differ a lot, so vectors returned in the export's length-sorted order instead of the input's would
# pair the wrong rows.
FIRST = ["a dog runs", "two men are playing football in a large green park on a sunny afternoon", "cats",
         "the woman is slicing an onion", "a boy", "people are walking along the beach at sunset with their dogs",
         "a man plays the guitar", "children"]
SECOND = ["a dog is running outside", "men play soccer", "a cat sleeps on the sofa next to the window",
          "a woman cuts vegetables", "a young boy is smiling at the camera", "a crowd on the shore",
          "someone is playing an instrument on a stage in front of many people", "kids"]
GOLD = [4.2, 3.5, 1.0, 3.8, 2.0, 2.5, 3.0, 4.8]
SOURCES = ["ein Hund rennt", "zwei Männer spielen Fußball", "Katzen", "die Frau schneidet eine Zwiebel",
           "ein Junge", "Leute gehen am Strand spazieren"]
TARGETS = ["a dog runs", "two men play football", "cats", "the woman slices an onion", "a boy",
           "people walk on the beach"]


def vectors(path, sentences):
    import tensorflow as tf

    return load_model(path)(tf.constant(sentences)).numpy()


def weighted_f1(labels, predictions):
    """sklearn's weighted F1, by hand: per gold label, F1 of the label as a class, weighted by its support."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    total = 0.0
    for label in np.unique(labels):
        true_positive = np.sum((predictions == label) & (labels == label))
        predicted, support = np.sum(predictions == label), np.sum(labels == label)
        precision = true_positive / predicted if predicted else 0.0
        recall = true_positive / support
        total += support * (2 * precision * recall / (precision + recall) if true_positive else 0.0)
    return total / len(labels)


@pytest.mark.slow
def test_sts_and_bitext_scores_are_mteb_s_own_on_the_export_s_vectors(export, tmp_path):
    first, second = vectors(export, FIRST), vectors(export, SECOND)
    spearman = 100 * stats.spearmanr(np.sum(first * second, axis=1), GOLD).statistic
    # Misaligned rows (the export's length order) would score differently: the check can fail.
    order = np.argsort([len(s) for s in FIRST], kind="stable")
    assert abs(100 * stats.spearmanr(np.sum(first[order] * second, axis=1), GOLD).statistic - spearman) > 1

    sources, targets = vectors(export, SOURCES), vectors(export, TARGETS)
    forward = weighted_f1(range(len(SOURCES)), np.argmax(sources @ targets.T, axis=1))
    backward = weighted_f1(range(len(SOURCES)), np.argmax(targets @ sources.T, axis=1))

    tasks = [local_sts("TinySTS", FIRST, SECOND, GOLD),
             local_bitext_mining("TinyBitext", SOURCES, TARGETS, ["deu", "eng"])]
    scores = mteb_run.evaluate(ExportEncoder(export), tasks, str(tmp_path), batch_size=3)
    assert scores[("TinySTS", "default", "validation")] == pytest.approx(spearman, abs=1e-4)
    assert scores[("TinyBitext", "deu-eng", "test")] == pytest.approx(100 * forward, abs=1e-4)
    if forward != backward:  # the direction matters on these vectors: the check tells them apart
        assert scores[("TinyBitext", "deu-eng", "test")] != pytest.approx(100 * backward, abs=1e-4)

    name = ExportEncoder(export).mteb_model_meta
    folder = tmp_path / "results" / name.name.replace("/", "__") / name.revision
    saved = json.loads((folder / "TinySTS.json").read_text())
    assert saved["scores"]["validation"][0]["main_score"] == pytest.approx(spearman / 100, abs=1e-6)
    assert (folder / "TinyBitext.json").exists()


def test_a_local_task_is_rebuilt_from_its_spec_with_the_same_rows():
    task = local_bitext_mining("TinyBitext", SOURCES, TARGETS, ["deu", "eng-Latn"])
    again = task_from_spec(json.loads(json.dumps(task_spec(task))))
    assert again.metadata == task.metadata and again.rows == task.rows
    sts = local_sts("TinySTS", FIRST, SECOND, GOLD, ["eng", "deu"])
    assert task_from_spec(task_spec(sts)).rows == sts.rows


@pytest.fixture(scope="module")
def prompted_exports(tmp_path_factory):
    """A checkpoint with named prompts and `default_prompt_name` query, exported with its default prompt inside
    and with none."""
    from tf_msemb.export.saved_model import export_saved_model
    from tf_msemb.models.pretrained import load_pretrained

    root = tmp_path_factory.mktemp("prompted")
    paths = {}
    for name, prompt in (("built_in", None), ("named", "")):
        tokenizer, encoder = load_pretrained(checkpoint("xlm_roberta_tokenizer_json"), prompt=prompt)
        paths[name] = export_saved_model(tokenizer, encoder, str(root / name))
    return paths


@pytest.mark.slow
def test_prompts_are_recorded_and_picked_as_sentence_transformers_picks_them(prompted_exports):
    import mteb
    from mteb.types import PromptType

    with open(os.path.join(prompted_exports["named"], "tf_msemb_export.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["prompt"] == "" and metadata["prompts"] == {"query": "query: ", "document": "passage: "}
    assert metadata["default_prompt_name"] == "query"

    encoder = ExportEncoder(prompted_exports["named"])
    retrieval = mteb.get_task("SciFact").metadata
    sts = local_sts("TinySTS", FIRST, SECOND, GOLD).metadata
    assert encoder.prompt(retrieval, PromptType.query) == "query: "
    assert encoder.prompt(retrieval, PromptType.document) == "passage: "
    assert encoder.prompt(sts, None) == "query: "  # no side: the default prompt, as `encode` applies it

    batches = [{"text": TARGETS[:4]}, {"text": TARGETS[4:]}]
    documents = encoder.encode(batches, task_metadata=retrieval, hf_split="test", hf_subset="default",
                               prompt_type=PromptType.document)
    np.testing.assert_allclose(documents, vectors(prompted_exports["named"], ["passage: " + t for t in TARGETS]),
                               atol=1e-5)
    assert np.max(np.abs(documents - vectors(prompted_exports["named"], TARGETS))) > 1e-3

    # Given prompts replace the checkpoint's, as `model_prompts` replaces a sentence-transformers model's.
    override = ExportEncoder(prompted_exports["named"], model_prompts={"STS": "sts: "})
    assert override.prompt(sts, None) == "sts: " and override.prompt(retrieval, PromptType.query) == ""


def test_an_export_with_its_own_prompt_takes_no_second_and_refuses_a_side_that_needs_another(prompted_exports):
    import mteb
    from mteb.types import PromptType

    encoder = ExportEncoder(prompted_exports["built_in"])
    retrieval = mteb.get_task("SciFact").metadata
    assert encoder.prompt(retrieval, PromptType.query) == ""
    assert encoder.prompt(local_sts("TinySTS", FIRST, SECOND, GOLD).metadata, None) == ""
    with pytest.raises(ValueError, match="puts 'query: ' before every text itself, but SciFact's document texts "
                                         "take 'passage: '"):
        encoder.prompt(retrieval, PromptType.document)


def _peer_available():
    check = subprocess.run([sys.executable, "-c", "import torch, sentence_transformers, mteb"], capture_output=True)
    return check.returncode == 0


def _write_local_files(directory):
    sts = directory / "tiny-sts.tsv"
    sts.write_text("".join(f"g\tf\t2020\t{i}\t{score}\t{a}\t{b}\n"
                           for i, (a, b, score) in enumerate(zip(FIRST, SECOND, GOLD))), encoding="utf-8")
    (directory / "tiny.deu-eng.deu").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (directory / "tiny.deu-eng.eng").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    return str(sts), f"{directory}/tiny.deu-eng.deu,{directory}/tiny.deu-eng.eng"


@pytest.mark.slow
@pytest.mark.skipif(not _peer_available(), reason="sentence-transformers and torch are not installed here")
def test_the_command_scores_an_export_beside_sentence_transformers_on_the_same_weights(tmp_path):
    """The tiny checkpoint exported, and the same directory run by MTEB's SentenceTransformerEncoderWrapper."""
    from tf_msemb.export.saved_model import export_saved_model
    from tf_msemb.models.pretrained import load_pretrained

    directory = checkpoint("bert_tokenizer_json")
    export = export_saved_model(*load_pretrained(directory), str(tmp_path / "tiny_st"))
    sts, bitext = _write_local_files(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "tf_msemb.evaluate", "--task=mteb", f"--model={export}", f"--mteb_sts={sts}",
         f"--mteb_bitext={bitext}", f"--mteb_peer={directory}", f"--mteb_output={tmp_path / 'mteb'}",
         f"--output={tmp_path / 'scores.json'}"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    columns = json.loads((tmp_path / "scores.json").read_text())
    ours = {tuple(row[:3]): row[3] for row in columns["tf_msemb/tiny_st"]}
    theirs = {tuple(row[:3]): row[3] for row in columns["sentence-transformers/bert_tokenizer_json"]}
    assert set(ours) == set(theirs) == {("LocalSTS-tiny-sts", "default", "validation"),
                                        ("LocalBitext-tiny.deu-eng", "deu-eng", "test")}
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], abs=0.01), key
    table = result.stdout.splitlines()
    assert table[0].split()[-2:] == ["tf_msemb/tiny_st", "sentence-transformers/bert_tokenizer_json"]
    assert any(line.startswith("LocalSTS-tiny-sts") for line in table)
    results = tmp_path / "mteb" / "results"
    assert sorted(p.name for p in results.iterdir()) == ["sentence-transformers__bert_tokenizer_json",
                                                         "tf_msemb__tiny_st"]
    assert len(list(results.glob("*/*/LocalSTS-tiny-sts.json"))) == 2


@pytest.mark.slow
def test_all_exports_scores_every_step_of_a_run(tokenizer, tmp_path):
    """`--all_exports`: a column per versioned export (and `export/best` where no step holds it), each its own."""
    import shutil

    import keras

    from tf_msemb.export.saved_model import export_version
    from tf_msemb.models.encoder import SentenceEncoder

    run = tmp_path / "run"
    for step in (5, 40):
        keras.utils.set_random_seed(step)
        encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                                  intermediate_dim=32, max_sequence_length=tokenizer.max_length)
        export_version(tokenizer, encoder, str(run / "export"), step, final=step == 40)
    shutil.copytree(run / "export" / "40", run / "export" / "best")
    sts, _ = _write_local_files(tmp_path)
    result = subprocess.run([sys.executable, "-m", "tf_msemb.evaluate", "--task=mteb", f"--model={run}",
                             "--all_exports", f"--mteb_sts={sts}", f"--mteb_output={tmp_path / 'mteb'}",
                             f"--output={tmp_path / 'scores.json'}"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    columns = json.loads((tmp_path / "scores.json").read_text())
    assert list(columns) == ["tf_msemb/run-5", "tf_msemb/run-40"]  # best holds step 40: no column of its own
    scores = [columns[name][0][3] for name in columns]
    for step, score in zip((5, 40), scores):
        first, second = vectors(str(run / "export" / str(step)), FIRST), vectors(str(run / "export" / str(step)),
                                                                                   SECOND)
        assert score == pytest.approx(100 * stats.spearmanr((first * second).sum(axis=1), GOLD)[0], abs=1e-4)
    assert scores[0] != scores[1]
    assert sorted(p.name for p in (tmp_path / "mteb" / "results").iterdir()) == ["tf_msemb__run-40",
                                                                                 "tf_msemb__run-5"]


def test_bad_task_specs_end_in_one_error_line(export, tmp_path):
    sts, _ = _write_local_files(tmp_path)
    for args, message in (
            ([f"--mteb_bitext={sts},{sts},xx-eng"], "'xx' is not an ISO 639-3 language code"),
            ([], "mteb needs --mteb_tasks"),
            (["--mteb_tasks=NoSuchTask"], "--mteb_tasks:")):
        result = subprocess.run([sys.executable, "-m", "tf_msemb.evaluate", "--task=mteb", f"--model={export}",
                                 *args], capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1].startswith("error: ") and message in result.stderr, \
            result.stderr[-2000:]


@pytest.mark.skipif(not _peer_available(), reason="sentence-transformers and torch are not installed here")
def test_a_prompted_export_scores_as_sentence_transformers_with_its_prompts(prompted_exports, tmp_path):
    """The checkpoint's default prompt `query: ` reaches STS and bitext texts on both sides."""
    tasks = [local_sts("TinySTS", FIRST, SECOND, GOLD), local_bitext_mining("TinyBitext", SOURCES, TARGETS,
                                                                            ["deu", "eng"])]
    ours = mteb_run.evaluate(ExportEncoder(prompted_exports["named"]), tasks, str(tmp_path))
    _, theirs = mteb_run.evaluate_peer(None, checkpoint("xlm_roberta_tokenizer_json"), [], tasks, str(tmp_path))
    assert set(ours) == set(theirs)
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], abs=0.01), key
    unprompted = mteb_run.evaluate(ExportEncoder(prompted_exports["named"], model_prompts={"STS": ""}), tasks[:1],
                                   str(tmp_path / "unprompted"))
    assert abs(unprompted[("TinySTS", "default", "validation")] - ours[("TinySTS", "default", "validation")]) > 0.01


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="../shared/data is absent")
@pytest.mark.skipif(not _peer_available(), reason="sentence-transformers and torch are not installed here")
def test_minilm_export_scores_as_sentence_transformers_on_local_sts_and_tatoeba(tmp_path):
    """all-MiniLM-L6-v2 (the packaged weights): our export against MTEB's run of the same directory."""
    from tf_msemb.export.saved_model import export_saved_model
    from tf_msemb.models.pretrained import load_pretrained
    from tf_msemb.models.pretrained import resolve_pretrained

    export = export_saved_model(*load_pretrained("all-MiniLM-L6-v2"), str(tmp_path / "minilm"))
    tatoeba = os.path.join(SHARED_DATA, "tatoeba", "tatoeba.deu-eng")
    local = [mteb_run.local_sts_task(os.path.join(SHARED_DATA, "stsbenchmark", "sts-dev.csv")),
             mteb_run.local_sts_task(os.path.join(SHARED_DATA, "stsb_multi_mt", "stsb-de-dev.csv") + ",deu"),
             mteb_run.local_bitext_task(f"{tatoeba}.deu,{tatoeba}.eng")]
    ours = mteb_run.evaluate(ExportEncoder(export), local, str(tmp_path / "mteb"))
    _, theirs = mteb_run.evaluate_peer(None, resolve_pretrained("all-MiniLM-L6-v2"), [], local,
                                       str(tmp_path / "mteb"))
    assert set(ours) == set(theirs) and len(ours) == 3
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], abs=0.01), key
