"""The evaluation entry point's task functions, on corpora with known answers."""

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.evaluate import evaluate_mining
from tf_msemb.evaluate import format_table


def number_model(texts):
    """Embeds `... <n>` as one-hot(n) plus a constant: same number -> cos 1, else cos 0.5."""
    numbers = tf.strings.to_number(tf.strings.regex_replace(texts, r"[^0-9]", ""), tf.int32)
    vectors = tf.concat([tf.one_hot(numbers, 64), tf.ones([tf.shape(texts)[0], 1])], axis=1)
    return tf.math.l2_normalize(vectors, axis=1)


def _split(tmp_path, name, matched, src_only, tgt_only):
    src = [f"s{n}\tquelle {n}" for n in matched + src_only]
    tgt = [f"t{n}\ttarget {n}" for n in tgt_only + matched]
    gold = [f"s{n}\tt{n}" for n in matched]
    paths = []
    for suffix, lines in (("src", src), ("tgt", tgt), ("gold", gold)):
        path = tmp_path / f"{name}.{suffix}"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return ",".join(paths)


@pytest.mark.parametrize("selection", ["intersect", "max", "forward"])
def test_mining_recovers_gold_and_applies_the_train_threshold(tmp_path, selection):
    train = _split(tmp_path, "train", matched=list(range(0, 20)), src_only=[40, 41, 42], tgt_only=[50, 51])
    test = _split(tmp_path, "test", matched=list(range(20, 30)), src_only=[43, 44], tgt_only=[52])
    results = evaluate_mining(number_model, train, test, k=4, selection=selection, verbose=False)
    assert results["train"]["f1"] == pytest.approx(1.0)
    assert results["test"]["f1"] == pytest.approx(1.0)
    assert results["test"]["threshold"] == results["train"]["threshold"]
    assert results["train"]["size"] == 20 and results["test"]["size"] == 10
    table = format_table(results, scale=100.0)
    assert "100.00" in table and f"{results['train']['threshold']:.2f}" in table


def test_mining_spec_errors(tmp_path):
    from tf_msemb.text_files import CorpusError

    with pytest.raises(CorpusError, match="SRC,TGT,GOLD"):
        evaluate_mining(number_model, "a,b", None, verbose=False)
    bad = tmp_path / "bad.src"
    bad.write_text("no tab here\n")
    with pytest.raises(CorpusError, match=r"bad\.src:1"):
        evaluate_mining(number_model, f"{bad},{bad},{bad}", None, verbose=False)


def test_sts_sets_pair_languages_row_by_row(tmp_path):
    from tf_msemb.text_files import CorpusError
    from tf_msemb.evaluate import sts_sets

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
    from tf_msemb.evaluate import evaluate_pool_retrieval

    src = _lines(tmp_path / "src.txt", [f"quelle {n}" for n in range(10)])
    # Rows 8 and 9 of the target side are swapped: those two queries miss at rank 1.
    tgt = _lines(tmp_path / "tgt.txt", [f"target {n}" for n in [0, 1, 2, 3, 4, 5, 6, 7, 9, 8]])
    distractors = _lines(tmp_path / "extra.txt", [f"other {n}" for n in range(20, 40)])
    for index in ("exact", "hnsw"):
        results = evaluate_pool_retrieval(number_model, [f"{src},{tgt}"], [distractors], index=index, verbose=False)
        (name, scores), = results.items()
        assert name == "src.txt / tgt.txt (pool 30)"
        assert scores["P@1"] == pytest.approx(0.8) and scores["size"] == 10


def test_documents_are_matched_by_id(tmp_path):
    from tf_msemb.text_files import CorpusError
    from tf_msemb.evaluate import evaluate_documents

    src = _lines(tmp_path / "docs.de", ["d1\tquelle 1", "d2\tquelle 3", "d1\tquelle 2", "d3\tquelle 5"])
    tgt = _lines(tmp_path / "docs.en", ["d3\ttarget 5", "d2\ttarget 3", "d1\ttarget 1", "d1\ttarget 2"])
    results = evaluate_documents(number_model, [f"{src},{tgt}"], verbose=False)
    assert results["documents docs.de / docs.en"] == {"P@1": 1.0, "P@3": 1.0, "P@10": 1.0, "size": 3}
    short = _lines(tmp_path / "short.en", ["d1\ttarget 1"])
    with pytest.raises(CorpusError, match=r"short\.en lacks documents \['d2', 'd3'\]"):
        evaluate_documents(number_model, [f"{src},{short}"], verbose=False)


def test_semeval_tracks_join_the_sts_sets_and_rank_by_cosine(tmp_path):
    from tf_msemb.evaluate import evaluate_sts
    from tf_msemb.evaluate import sts_sets

    # number_model: equal numbers -> cos 1, different -> 0.5; gold agrees on the ranking.
    (tmp_path / "STS.input.track5.en-en.txt").write_text("a 1\tb 1\na 2\tb 3\na 4\tb 4\na 5\tb 7\n")
    (tmp_path / "STS.gs.track5.en-en.txt").write_text("5\n1\n4.5\n0\n")
    sets = sts_sets(semeval_dir=str(tmp_path))
    results = evaluate_sts(number_model, sets, verbose=False)
    assert list(results) == ["semeval track5.en-en"]
    assert results["semeval track5.en-en"]["spearman"] == pytest.approx(100 * np.sqrt(0.8))
    assert results["semeval track5.en-en"]["size"] == 4


def test_table_with_different_metrics_per_row():
    table = format_table({"a": {"mean": 0.5, "size": 3}, "b": {"P@1": 0.25, "size": 4}}, scale=100.0)
    header, row_a, row_b = table.splitlines()
    assert header.split()[-2:] == ["mean", "P@1"]
    assert row_a.split()[-2:] == ["50.00", "-"] and row_b.split()[-2:] == ["-", "25.00"]
