"""The quickstart recipe end to end, as `make quickstart` runs it, and the evaluation CLI on its model."""

import json
import pathlib
import re

import pytest

from conftest import CORPUS as CORPUS_DIR
from conftest import run
from tf_msemb.export.saved_model import OPERATIVE_CONFIG_HEADER
from tf_msemb.quickstart import corpus_pairs

CORPUS = pathlib.Path(CORPUS_DIR)


def test_the_dev_split_is_disjoint_from_training_and_named_by_package_paths():
    pairs = corpus_pairs("dev")
    assert [tuple(pathlib.Path(p).name for p in pair) for pair in pairs] == [
        ("dev.en.txt", "dev.de.txt"), ("dev.en.txt", "dev.fr.txt"), ("dev.en.txt", "dev.es.txt")]
    assert all(pathlib.Path(p).is_absolute() for pair in pairs for p in pair)
    dev = set((CORPUS / "dev.en.txt").read_text().splitlines())
    assert len(dev) == 40
    for split in ("train", "heldout"):
        assert not dev & set((CORPUS / f"{split}.en.txt").read_text().splitlines())


@pytest.mark.slow
def test_quickstart_trains_exports_and_retrieves_held_out_translations(quickstart_run):
    work, outputs = quickstart_run
    assert "en-de: wrote 350 pairs" in outputs["records"]
    assert "step 400/400" in outputs["train"]
    assert "Exported SavedModel: runs/quickstart/model/export/final" in outputs["train"]
    # Dev retrieval on the corpus' dev split every 200 steps; the best step is kept as export/best.
    evaluations = [line for line in outputs["train"].splitlines() if line.startswith("eval step ")]
    assert [line.split()[2] for line in evaluations] == ["200", "400"]
    best = json.loads((work / "runs/quickstart/model/export/best/tf_msemb_export.json").read_text())
    assert best["selection"]["metric"] == "retrieval/mean" and best["selection"]["step"] in (200, 400)
    # The command line's recipe, data and dev figures reach every export's metadata and model card.
    final = json.loads((work / "runs/quickstart/model/export/final/tf_msemb_export.json").read_text())
    # Named without this machine's paths: the recipe (outside the run's working directory) and data by name.
    assert final["provenance"]["gin_files"] == ["quickstart.gin"]
    assert final["provenance"]["data"] == [{"file": "quickstart.manifest.json", "examples": 1050}]
    assert [row["step"] for row in final["provenance"]["dev_results"]] == [200, 400]
    card = (work / "runs/quickstart/model/export/best/README.md").read_text()
    assert "| recipe | quickstart.gin |" in card and "| 400 | " in card and str(work) not in card
    assert f"This export is the best step by `retrieval/mean` (max): step {best['selection']['step']}" in card
    # The export's copy of the gin config: the run's, its paths portable (this run's are relative already).
    assert (work / "runs/quickstart/model/export/final/operative_config.gin").read_text() == \
        OPERATIVE_CONFIG_HEADER + (work / "runs/quickstart/model/operative_config.gin").read_text()
    pairs = [f"--pair={CORPUS}/heldout.en.txt,{CORPUS}/heldout.{l}.txt" for l in ("de", "fr", "es")]
    out = run(["-m", "tf_msemb.evaluate", "--model=runs/quickstart/model", "--task=retrieval",
               "--output=result.json", *pairs], work)
    assert "heldout.en.txt / heldout.de.txt" in out
    results = json.loads((work / "result.json").read_text())
    assert len(results) == 3
    for name, r in results.items():
        assert r["size"] == 110
        # Chance is 1/110; a working model finds most translations.
        assert r["mean"] > 0.6, (name, r)


PLACES = ("market", "village", "station", "kitchen", "Sunday", "river", "park", "garden")


def _places_tsv(path, split, lang):
    """`place<TAB>sentence` for the lines whose English side names one of PLACES (labels follow alignment)."""
    english = (CORPUS / f"{split}.en.txt").read_text().splitlines()
    other = (CORPUS / f"{split}.{lang}.txt").read_text().splitlines()
    rows = []
    for en, text in zip(english, other):
        place = next((p for p in PLACES if re.search(rf"\b{p}\b", en)), None)
        if place:
            rows.append(f"{place}\t{text}")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


@pytest.mark.slow
def test_classifier_trained_on_english_places_transfers_to_german_and_french(quickstart_run, tmp_path):
    work, _ = quickstart_run
    train = _places_tsv(tmp_path / "places.en.tsv", "train", "en")
    tests = [_places_tsv(tmp_path / f"places.{l}.tsv", "heldout", l) for l in ("de", "fr")]
    out = run(["-m", "tf_msemb.evaluate", f"--model={work}/runs/quickstart/model", "--task=classify",
               f"--classify_train={train}", *[f"--classify_test={t}" for t in tests], "--seeds=3",
               f"--output={tmp_path}/classify.json"], work)
    results = json.loads((tmp_path / "classify.json").read_text())
    assert "places.de.tsv" in out and "std" in out
    for name in ("places.de.tsv", "places.fr.tsv"):
        # Eight places: chance is about 0.125.
        assert results[name]["accuracy"] > 0.5, results
        assert results[name]["size"] > 50


@pytest.mark.slow
def test_pool_and_document_retrieval_with_exact_and_approximate_indexes(quickstart_run, tmp_path):
    work, _ = quickstart_run
    pool = f"--pool_pair={CORPUS}/heldout.en.txt,{CORPUS}/heldout.de.txt"
    distractors = f"--pool_distractors={CORPUS}/train.de.txt"
    docs = []
    for lang in ("en", "de"):
        lines = (CORPUS / f"heldout.{lang}.txt").read_text().splitlines()
        docs.append(tmp_path / f"docs.{lang}")
        docs[-1].write_text("".join(f"doc{i // 5}\t{line}\n" for i, line in enumerate(lines)))
    results = {}
    for index in ("exact", "hnsw"):
        run(["-m", "tf_msemb.evaluate", f"--model={work}/runs/quickstart/model", "--task=retrieval", pool,
             distractors, f"--doc_pair={docs[0]},{docs[1]}", f"--index={index}", f"--output={tmp_path}/{index}.json"],
            work)
        results[index] = json.loads((tmp_path / f"{index}.json").read_text())
    sentences = results["exact"]["heldout.en.txt / heldout.de.txt (pool 460)"]
    assert 0.5 < sentences["P@1"] <= sentences["P@3"] <= sentences["P@10"]
    # 22 documents of 5 sentences: whole documents are easier to match than sentences.
    documents = results["exact"]["documents docs.en / docs.de"]
    assert documents["size"] == 22 and documents["P@1"] >= sentences["P@1"]
    assert abs(results["hnsw"]["heldout.en.txt / heldout.de.txt (pool 460)"]["P@1"] - sentences["P@1"]) < 0.05


@pytest.mark.slow
def test_mining_cli_picks_the_threshold_on_train_and_reports_test(quickstart_run, tmp_path):
    work, _ = quickstart_run
    english = (CORPUS / "heldout.en.txt").read_text().splitlines()
    german = (CORPUS / "heldout.de.txt").read_text().splitlines()
    extra_en = (CORPUS / "train.en.txt").read_text().splitlines()
    extra_de = (CORPUS / "train.de.txt").read_text().splitlines()
    args = []
    for split, rows, distractors in (("train", range(0, 55), range(0, 30)), ("test", range(55, 110), range(30, 60))):
        # Gold pairs plus sentences on each side that have no translation in the other pool.
        src = [f"en{i}\t{english[i]}" for i in rows] + [f"xen{j}\t{extra_en[j]}" for j in distractors]
        tgt = [f"xde{j}\t{extra_de[j + 100]}" for j in distractors] + [f"de{i}\t{german[i]}" for i in rows][::-1]
        gold = [f"en{i}\tde{i}" for i in rows]
        for name, lines in (("src", src), ("tgt", tgt), ("gold", gold)):
            (tmp_path / f"{split}.{name}").write_text("\n".join(lines) + "\n")
        suffix = "_train" if split == "train" else ""
        args += [f"--{name}{suffix}={tmp_path}/{split}.{name}" for name in ("src", "tgt", "gold")]
    run(["-m", "tf_msemb.evaluate", f"--model={work}/runs/quickstart/model", "--task=mining", "--selection=max",
         f"--output={tmp_path}/mining.json", *args], work)
    results = json.loads((tmp_path / "mining.json").read_text())
    assert results["test"]["threshold"] == results["train"]["threshold"]
    assert results["train"]["size"] == results["test"]["size"] == 55
    assert results["test"]["f1"] > 0.7, results
