"""The evaluation entry point: its evaluators on corpora with known answers, and the CLI's figures and tables."""

import functools
import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb import evaluate
from tf_msemb.evaluate import format_table
from tf_msemb.evaluation.distillation import DistillationMSE
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.mining import MiningEvaluator
from tf_msemb.evaluation.retrieval import DocumentRetrieval
from tf_msemb.evaluation.retrieval import PoolRetrieval
from tf_msemb.evaluation.retrieval import TranslationRetrieval
from tf_msemb.evaluation.sts import STSEvaluator
from tf_msemb.evaluation.sts import sts_sets
from tf_msemb.export.saved_model import export_version
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.text_files import CorpusError


def number_model(texts):
    """Embeds `... <n>` as one-hot(n) plus a constant: same number -> cos 1, else cos 0.5."""
    numbers = tf.strings.to_number(tf.strings.regex_replace(texts, r"[^0-9]", ""), tf.int32)
    vectors = tf.concat([tf.one_hot(numbers, 64), tf.ones([tf.shape(texts)[0], 1])], axis=1)
    return tf.math.l2_normalize(vectors, axis=1)


number_embed = functools.partial(encode, number_model, verbose=False)


def _split(tmp_path, name, matched, src_only, tgt_only):
    src = [f"s{n}\tquelle {n}" for n in matched + src_only]
    tgt = [f"t{n}\ttarget {n}" for n in tgt_only + matched]
    gold = [f"s{n}\tt{n}" for n in matched]
    paths = []
    for suffix, lines in (("src", src), ("tgt", tgt), ("gold", gold)):
        path = tmp_path / f"{name}.{suffix}"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return tuple(paths)


@pytest.mark.parametrize("selection", ["intersect", "max", "forward"])
def test_mining_recovers_gold_and_applies_the_train_threshold(tmp_path, selection):
    train = _split(tmp_path, "train", matched=list(range(0, 20)), src_only=[40, 41, 42], tgt_only=[50, 51])
    test = _split(tmp_path, "test", matched=list(range(20, 30)), src_only=[43, 44], tgt_only=[52])
    results = MiningEvaluator(train, test, k=4, selection=selection).evaluate(number_embed)
    assert results["train"]["f1"] == pytest.approx(1.0)
    assert results["test"]["f1"] == pytest.approx(1.0)
    assert results["test"]["threshold"] == results["train"]["threshold"]
    assert results["train"]["size"] == 20 and results["test"]["size"] == 10
    table = format_table(results, scale=100.0)
    assert "100.00" in table and f"{results['train']['threshold']:.2f}" in table


def test_mining_spec_errors(tmp_path):
    with pytest.raises(CorpusError, match="source, target, gold"):
        MiningEvaluator(("a", "b"))
    bad = tmp_path / "bad.src"
    bad.write_text("no tab here\n")
    with pytest.raises(CorpusError, match=r"bad\.src:1"):
        MiningEvaluator((str(bad), str(bad), str(bad)))


def test_sts_sets_pair_languages_row_by_row(tmp_path):
    (tmp_path / "stsb-en-dev.csv").write_text("A dog runs.,A dog is running.,4.5\n")
    (tmp_path / "stsb-de-dev.csv").write_text("Ein Hund rennt.,Ein Hund rennt gerade.,4.5\n")
    sets = sts_sets(stsb_dir=str(tmp_path), stsb_pairs=["en-de"])
    first, second, gold = sets["stsb dev en-de"]
    assert first == ["A dog runs."] and second == ["Ein Hund rennt gerade."] and list(gold) == [4.5]
    with pytest.raises(CorpusError, match="L1-L2"):
        sts_sets(stsb_dir=str(tmp_path), stsb_pairs=["en"])


def _lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_pool_retrieval_counts_distractors_and_scores_p_at_k(tmp_path):
    src = _lines(tmp_path / "src.txt", [f"quelle {n}" for n in range(10)])
    # Rows 8 and 9 of the target side are swapped: those two queries miss at rank 1.
    tgt = _lines(tmp_path / "tgt.txt", [f"target {n}" for n in [0, 1, 2, 3, 4, 5, 6, 7, 9, 8]])
    distractors = _lines(tmp_path / "extra.txt", [f"other {n}" for n in range(20, 40)])
    for index in ("exact", "hnsw"):
        results = PoolRetrieval([(src, tgt)], [distractors], index=index).evaluate(number_embed)
        (name, scores), = results.items()
        assert name == "src.txt / tgt.txt (pool 30)"
        assert scores["P@1"] == pytest.approx(0.8) and scores["size"] == 10


def test_documents_are_matched_by_id(tmp_path):
    src = _lines(tmp_path / "docs.de", ["d1\tquelle 1", "d2\tquelle 3", "d1\tquelle 2", "d3\tquelle 5"])
    tgt = _lines(tmp_path / "docs.en", ["d3\ttarget 5", "d2\ttarget 3", "d1\ttarget 1", "d1\ttarget 2"])
    results = DocumentRetrieval([(src, tgt)]).evaluate(number_embed)
    assert results["documents docs.de / docs.en"] == {"P@1": 1.0, "P@3": 1.0, "P@10": 1.0, "size": 3}
    short = _lines(tmp_path / "short.en", ["d1\ttarget 1"])
    with pytest.raises(CorpusError, match=r"short\.en lacks documents \['d2', 'd3'\]"):
        DocumentRetrieval([(src, short)])


def test_semeval_tracks_join_the_sts_sets_and_rank_by_cosine(tmp_path):
    # number_model: equal numbers -> cos 1, different -> 0.5; gold agrees on the ranking.
    (tmp_path / "STS.input.track5.en-en.txt").write_text("a 1\tb 1\na 2\tb 3\na 4\tb 4\na 5\tb 7\n")
    (tmp_path / "STS.gs.track5.en-en.txt").write_text("5\n1\n4.5\n0\n")
    results = STSEvaluator(semeval_dir=str(tmp_path)).evaluate(number_embed)
    assert list(results) == ["semeval track5.en-en"]
    assert results["semeval track5.en-en"]["spearman"] == pytest.approx(100 * np.sqrt(0.8))
    assert results["semeval track5.en-en"]["size"] == 4


def test_table_with_different_metrics_per_row():
    table = format_table({"a": {"mean": 0.5, "size": 3}, "b": {"P@1": 0.25, "size": 4}}, scale=100.0)
    header, row_a, row_b = table.splitlines()
    assert header.split()[-2:] == ["mean", "P@1"]
    assert row_a.split()[-2:] == ["50.00", "-"] and row_b.split()[-2:] == ["-", "25.00"]


def run_cli(capsys, *args):
    """`python -m tf_msemb.evaluate ARGS` in this process; returns the table it prints (after any progress bars)."""
    evaluate.FLAGS(["evaluate", *args])
    try:
        capsys.readouterr()
        evaluate.main([])
    finally:
        evaluate.FLAGS.unparse_flags()
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("set ", "    step ")))
    return lines[start:]


def test_cli_prints_and_writes_the_evaluators_figures(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluate, "load_model", lambda path: number_model)
    src = _lines(tmp_path / "src.txt", [f"quelle {n}" for n in range(10)])
    tgt = _lines(tmp_path / "tgt.txt", [f"target {n}" for n in [0, 1, 2, 3, 4, 5, 6, 7, 9, 8]])
    docs = _lines(tmp_path / "docs.de", ["d1\tquelle 1", "d2\tquelle 3"])
    table = run_cli(capsys, "--model=unused", "--task=retrieval", f"--pair={src},{tgt}", f"--pool_pair={src},{tgt}",
                    f"--doc_pair={docs},{docs}", f"--output={tmp_path}/out.json")
    expected = {}
    for evaluator in TranslationRetrieval([(src, tgt)]), PoolRetrieval([(src, tgt)]), DocumentRetrieval([(docs, docs)]):
        expected |= evaluator.evaluate(number_embed)
    assert json.loads((tmp_path / "out.json").read_text()) == expected
    assert table == format_table(expected, scale=100.0).splitlines()
    assert table[1].split()[-6:-3] == ["80.00", "80.00", "80.00"]  # src->tgt, tgt->src, mean of the pair

    train = _split(tmp_path, "train", matched=list(range(0, 20)), src_only=[40], tgt_only=[50])
    table = run_cli(capsys, "--model=unused", "--task=mining", *[f"--{flag}_train={path}" for flag, path in
                                                                zip(("src", "tgt", "gold"), train)])
    threshold = MiningEvaluator(train).evaluate(number_embed)["train"]["threshold"]
    assert table[1].split() == ["train", "20", "100.00", "100.00", "100.00", f"{threshold:.2f}"]
    with pytest.raises(CorpusError, match="mining needs --src_train"):
        run_cli(capsys, "--model=unused", "--task=mining", f"--src_train={train[0]}")


def _tiny_export(tokenizer, export_dir, step, final=False):
    keras.utils.set_random_seed(step)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32,
                              max_sequence_length=tokenizer.max_length)
    export_version(tokenizer, encoder, export_dir, step, final=final)
    return encoder


@pytest.fixture(scope="module")
def model_dir(tokenizer, tmp_path_factory):
    """A training model_dir with exports at steps 5 and 40 (also `final`) of differently seeded tiny encoders."""
    path = tmp_path_factory.mktemp("run")
    for step in (40, 5):
        _tiny_export(tokenizer, str(path / "export"), step, final=step == 40)
    return path


@pytest.mark.slow
def test_all_exports_tabulates_the_summary_metrics_over_steps(model_dir, tmp_path, capsys):
    english = _lines(tmp_path / "held.en", ["The woman reads a book.", "A dog runs in the park.", "We eat bread.",
                                            "The train is late today."])
    german = _lines(tmp_path / "held.de", ["Die Frau liest ein Buch.", "Ein Hund rennt im Park.", "Wir essen Brot.",
                                           "Der Zug ist heute spät."])
    pairs = [(english, german), (german, english)]
    table = run_cli(capsys, f"--model={model_dir}", "--all_exports", "--task=retrieval",
                    *[f"--pair={src},{tgt}" for src, tgt in pairs], f"--output={tmp_path}/steps.json")
    written = json.loads((tmp_path / "steps.json").read_text())
    assert list(written) == ["5", "40"]  # numbered exports in step order; `final` is step 40 again
    assert table[0].split() == ["step", "retrieval/src->tgt", "retrieval/tgt->src", "retrieval/mean"]
    evaluator = TranslationRetrieval(pairs)
    for row, step in zip(table[1:], (5, 40)):
        embed = functools.partial(encode, load_model(str(model_dir / "export" / str(step))), verbose=False)
        assert written[str(step)] == evaluator.evaluate(embed)
        flat = evaluator(embed)
        means = [flat[f"retrieval/{metric}"] for metric in ("src->tgt", "tgt->src", "mean")]
        assert row.split() == [str(step)] + [f"{100 * value:.2f}" for value in means]
    with pytest.raises(FileNotFoundError, match="No versioned exports"):
        run_cli(capsys, f"--model={model_dir}/export/final", "--all_exports", f"--pair={english},{german}")


@pytest.mark.slow
def test_all_exports_adds_the_best_export_where_no_step_holds_it(model_dir, tokenizer, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(model_dir, run)
    # Selected at step 20 (evaluated, not exported there): a third encoder, unlike the steps' ones.
    _tiny_export(tokenizer, str(tmp_path / "selected"), 20)
    shutil.copytree(tmp_path / "selected" / "20", run / "export" / "best")
    english = _lines(tmp_path / "held.en", ["The woman reads a book.", "A dog runs in the park.", "We eat bread."])
    german = _lines(tmp_path / "held.de", ["Die Frau liest ein Buch.", "Ein Hund rennt im Park.", "Wir essen Brot."])
    table = run_cli(capsys, f"--model={run}", "--all_exports", f"--pair={english},{german}",
                    f"--output={tmp_path}/steps.json")
    written = json.loads((tmp_path / "steps.json").read_text())
    assert list(written) == ["5", "40", "best"] and [row.split()[0] for row in table[1:]] == ["5", "40", "best"]
    embed = functools.partial(encode, load_model(str(run / "export" / "best")), verbose=False)
    assert written["best"] == TranslationRetrieval([(english, german)]).evaluate(embed)
    # Where a step's export holds the selected step, the table has no row of its own for it.
    shutil.rmtree(run / "export" / "best")
    shutil.copytree(run / "export" / "40", run / "export" / "best")
    table = run_cli(capsys, f"--model={run}", "--all_exports", f"--pair={english},{german}")
    assert [row.split()[0] for row in table[1:]] == ["5", "40"]


def test_distillation_teacher_from_an_export_or_a_pretrained_model(model_dir, tokenizer, tmp_path, capsys,
                                                                   monkeypatch):
    sentences = ["The woman reads a book.", "A dog runs in the park."]
    english = _lines(tmp_path / "held.en", sentences)
    german = _lines(tmp_path / "held.de", ["Die Frau liest ein Buch.", "Ein Hund rennt im Park."])
    student = functools.partial(encode, load_model(str(model_dir / "export" / "40")), verbose=False)
    # The model_dir means its export/final, the step-40 encoder: as student and teacher, the source sides agree.
    results = DistillationMSE([(english, german)], str(model_dir)).evaluate(student)["held.en / held.de"]
    assert results["mse_src"] == pytest.approx(0.0, abs=1e-5) and results["mse_tgt"] > 0.01

    encoder = _tiny_export(tokenizer, str(tmp_path / "unused"), 7)
    monkeypatch.setattr("tf_msemb.evaluation.distillation.load_teacher", lambda name, prompt=None: (tokenizer, encoder))
    teacher = l2_normalize(encoder(tokenizer(tf.constant(sentences)), training=False)).numpy()
    expected = np.mean(np.sum((teacher - student(sentences)) ** 2, axis=1))
    results = DistillationMSE([(english, german)], "some-pretrained-model").evaluate(student)["held.en / held.de"]
    assert results["mse_src"] == pytest.approx(expected, rel=1e-4)

    table = run_cli(capsys, f"--model={model_dir}", "--task=distillation", f"--pair={english},{german}",
                    f"--teacher={model_dir}/export/40")
    assert table[0].split() == ["set", "size", "mse_src", "mse_tgt", "mse"]
    assert table[1].split()[-3] == "0.00"
