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
    from tf_msemb.data.text_files import CorpusError

    with pytest.raises(CorpusError, match="SRC,TGT,GOLD"):
        evaluate_mining(number_model, "a,b", None, verbose=False)
    bad = tmp_path / "bad.src"
    bad.write_text("no tab here\n")
    with pytest.raises(CorpusError, match=r"bad\.src:1"):
        evaluate_mining(number_model, f"{bad},{bad},{bad}", None, verbose=False)


def test_sts_sets_pair_languages_row_by_row(tmp_path):
    from tf_msemb.data.text_files import CorpusError
    from tf_msemb.evaluate import sts_sets

    (tmp_path / "stsb-en-dev.csv").write_text("A dog runs.,A dog is running.,4.5\n")
    (tmp_path / "stsb-de-dev.csv").write_text("Ein Hund rennt.,Ein Hund rennt gerade.,4.5\n")
    sets = sts_sets(stsb_dir=str(tmp_path), stsb_pairs=["en-de"])
    first, second, gold = sets["stsb dev en-de"]
    assert first == ["A dog runs."] and second == ["Ein Hund rennt gerade."] and list(gold) == [4.5]
    with pytest.raises(CorpusError, match="L1-L2"):
        sts_sets(stsb_dir=str(tmp_path), stsb_pairs=["en"])
