import os

import numpy as np
import pytest

from conftest import SHARED_DATA
from tf_msemb.text_files import CorpusError
from tf_msemb.evaluation.sts import cross_lingual
from tf_msemb.data.labeled_pairs import read_stsb_csv
from tf_msemb.data.labeled_pairs import read_stsb_tsv
from tf_msemb.evaluation.sts import correlations
from tf_msemb.evaluation.sts import row_cosines


def test_known_ranking():
    # Cosines 1, 0.6, 0, -1 against gold 5, 4, 1, 0: same order -> Spearman 100.
    e1 = np.array([[1, 0], [1, 0], [1, 0], [1, 0]], np.float32)
    e2 = np.array([[2, 0], [0.6, 0.8], [0, 3], [-1, 0]], np.float32)
    result = correlations(row_cosines(e1, e2), np.array([5.0, 4.0, 1.0, 0.0]))
    assert result["spearman"] == pytest.approx(100.0)
    expected_pearson = np.corrcoef([1, 0.6, 0, -1], [5, 4, 1, 0])[0, 1] * 100
    assert result["pearson"] == pytest.approx(expected_pearson, rel=1e-6)
    reversed_gold = correlations(row_cosines(e1, e2), np.array([0.0, 1.0, 4.0, 5.0]))
    assert reversed_gold["spearman"] == pytest.approx(-100.0)


def test_readers_and_cross_lingual(tmp_path):
    tsv = tmp_path / "sts.tsv"
    tsv.write_text("g\tf\t2012\t0001\t4.5\tA dog runs.\tA dog is running.\textra\tfields\n"
                   "g\tf\t2012\t0002\t0.0\tA cat.\tThe stock fell.\n", encoding="utf-8")
    first, second, gold = read_stsb_tsv(str(tsv))
    assert first == ["A dog runs.", "A cat."] and second[0] == "A dog is running." and list(gold) == [4.5, 0.0]
    en, de = tmp_path / "stsb-en-dev.csv", tmp_path / "stsb-de-dev.csv"
    en.write_text('A dog runs.,"A dog, running.",4.5\nA cat.,The stock fell.,0.0\n', encoding="utf-8")
    de.write_text("Ein Hund rennt.,Ein Hund rennt gerade.,4.5\nEine Katze.,Die Aktie fiel.,0.0\n", encoding="utf-8")
    s1, s2, gold = cross_lingual(read_stsb_csv(str(en)), read_stsb_csv(str(de)))
    assert s1 == ["A dog runs.", "A cat."] and s2 == ["Ein Hund rennt gerade.", "Die Aktie fiel."]
    assert read_stsb_csv(str(en))[1][0] == "A dog, running."
    bad = tmp_path / "bad.tsv"
    bad.write_text("only\tthree\tfields\n")
    with pytest.raises(CorpusError, match=r"bad\.tsv:1"):
        read_stsb_tsv(str(bad))


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED_DATA, "stsb_multi_mt")), reason="../shared/data absent")
def test_real_files_parse():
    first, second, gold = read_stsb_tsv(os.path.join(SHARED_DATA, "stsbenchmark", "sts-dev.csv"))
    assert len(first) == len(second) == len(gold) == 1500 and gold.min() >= 0 and gold.max() <= 5
    en = read_stsb_csv(os.path.join(SHARED_DATA, "stsb_multi_mt", "stsb-en-dev.csv"))
    de = read_stsb_csv(os.path.join(SHARED_DATA, "stsb_multi_mt", "stsb-de-dev.csv"))
    assert len(cross_lingual(en, de)[0]) == 1500
    np.testing.assert_allclose(en[2], de[2])


def test_language_bias_by_hand():
    from tf_msemb.evaluation.sts import language_bias

    # Each set alone ranks perfectly; joined, set B's cosines sit above set A's
    # although its gold scores are lower, so the pool ranks worse.
    a = (np.array([0.1, 0.2, 0.3]), np.array([3.0, 4.0, 5.0]))
    b = (np.array([0.7, 0.8, 0.9]), np.array([0.0, 1.0, 2.0]))
    joined, difference = language_bias([a, b])
    expected = 100 * np.corrcoef(np.argsort(np.argsort([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])),
                                 np.argsort(np.argsort([3, 4, 5, 0, 1, 2])))[0, 1]
    assert joined["spearman"] == pytest.approx(expected)
    assert difference["spearman"] == pytest.approx(expected - 100.0)
    assert difference["size"] == 6
    unbiased_joined, unbiased = language_bias([a, (np.array([0.4, 0.5, 0.6]), np.array([6.0, 7.0, 8.0]))])
    assert unbiased["spearman"] == pytest.approx(0.0)
