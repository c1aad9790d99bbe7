"""The multilingual dev table (evaluation.multilingual_dev): BUCC-style pools, every figure against hand values on a
data folder of the real layout, and the real folder's sets."""

import gzip
import os

import numpy as np
import pytest
from scipy import stats

from conftest import SHARED_DATA
from dev_data import KEY
from dev_data import MISTRANSLATED_CS
from dev_data import MISTRANSLATED_DE
from dev_data import MISTRANSLATED_FR_NEWS
from dev_data import N_NEWS
from dev_data import caption
from dev_data import N_STS
from dev_data import N_TATOEBA
from dev_data import N_VAL
from dev_data import key_vectors
from dev_data import write_dev_data
from tf_msemb.evaluation.multilingual_dev import MULTI30K_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import NEWS_DEV
from tf_msemb.evaluation.multilingual_dev import NEWS_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import STS_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import XSTS_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import MultilingualDev
from tf_msemb.evaluation.multilingual_dev import bucc_style_splits
from tf_msemb.evaluation.multilingual_dev import figures
from tf_msemb.evaluation.multilingual_dev import news_pairs
from tf_msemb.evaluation.multilingual_dev import sts_halves
from tf_msemb.text_files import CorpusError

def _key(sentence):
    return KEY.search(sentence).group(1)


def _key_pairs(split):
    """The pairs the fake encoder's one-hot vectors mine: same meaning key on both sides (margin 4, all else none)."""
    keys = dict(zip(split.tgt_ids, map(_key, split.tgt)))
    return {(i, j) for i, s in zip(split.src_ids, split.src) for j, key in keys.items() if key == _key(s)}


def test_bucc_style_pools_come_from_val_alone_in_disjoint_halves_of_one_size(tmp_path):
    write_dev_data(tmp_path)
    splits = bucc_style_splits(str(tmp_path / "multi30k"), seed=1)
    assert sorted(splits) == sorted(MULTI30K_LANGUAGES)
    english = {}
    for lang, (threshold, test) in splits.items():
        lines = {}
        # Equal pools: the ratio margin's scale depends on the pool's size, so a threshold tuned on smaller pools misfits.
        for name, split, size in (("threshold", threshold, N_VAL // 2 // 3), ("test", test, (N_VAL - N_VAL // 2) // 3)):
            assert len(split.gold) == size and len(split.src) == len(split.tgt) == 2 * size
            assert all(s.startswith(f"{lang} ") for s in split.src) and all(t.startswith("en ") for t in split.tgt)
            keys_src, keys_tgt = [_key(s) for s in split.src], [_key(t) for t in split.tgt]
            assert all(key.startswith("v") for key in keys_src + keys_tgt)  # val only: no recipe trains on it
            # Gold pairs are aligned lines; a distractor's line is on one side only.
            lines[name] = {int(k[1:]) for k in keys_tgt}
            if lang != "cs":
                assert _key_pairs(split) == split.gold, name
            english.setdefault(name, split.tgt)
            assert split.tgt == english[name]  # one draw: the English pools are shared by every pair
        assert not lines["threshold"] & lines["test"]  # the threshold is tuned on other lines than the test pools


def test_bucc_style_pools_skip_blank_and_repeated_lines(tmp_path):
    write_dev_data(tmp_path)
    folder = tmp_path / "multi30k"
    for lang in ("en", *MULTI30K_LANGUAGES):
        with gzip.open(folder / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            val = f.read().splitlines()
        if lang == "de":
            val[7] = val[3]  # line 7 would be a twin of line 3 in German
        if lang == "fr":
            val[9] = " "
        with gzip.open(folder / f"val.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(val) + "\n")
    for threshold, test in bucc_style_splits(str(folder)).values():
        used = [_key(s) for split in (threshold, test) for s in split.tgt]
        assert "v7" not in used and "v9" not in used and "v3" in used
        assert len(test.src) == 2 * ((N_VAL - 2 - (N_VAL - 2) // 2) // 3)
    with gzip.open(folder / "val.cs.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(caption("cs", f"v{i}") for i in range(17)) + "\n")
    with pytest.raises(CorpusError, match="not line-aligned"):
        bucc_style_splits(str(folder))


def test_sts_halves_keep_rows_that_share_a_sentence_together():
    # "a" joins rows 0 and 3, "b" rows 1 and 4, "c" rows 2 and 9: a plain shuffle of rows splits some pair.
    first = ["a", "b", "c", "a", "d", "e", "f", "g", "h", "c"]
    second = ["x", "y", "z", "w", "b", "u", "v", "s", "t", "r"]
    for seed in range(6):
        select, report = sts_halves(first, second, seed)
        assert sorted(select + report) == list(range(10)) and abs(len(select) - 5) <= 2
        sentences = [{first[i], second[i]} for i in select], [{first[i], second[i]} for i in report]
        assert not set().union(*sentences[0]) & set().union(*sentences[1])


def test_every_figure_equals_its_hand_value(tmp_path):
    gold = np.asarray(write_dev_data(tmp_path))
    dev = MultilingualDev(str(tmp_path))
    rows = dev.evaluate(key_vectors)

    wrong = MISTRANSLATED_CS / N_VAL
    for lang in MULTI30K_LANGUAGES:
        expected = 1.0 - (wrong if lang == "cs" else 0.0)
        assert rows[f"multi30k val en-{lang}"]["src->tgt"] == pytest.approx(expected)
        assert rows[f"multi30k val en-{lang}"]["tgt->src"] == pytest.approx(expected)

    select, report = sts_halves([f"first {i}" for i in range(N_STS)], [f"second {i}" for i in range(N_STS)])
    assert len(select) == len(report) == N_STS // 2
    assert 0 < sum(i < MISTRANSLATED_DE for i in report) < MISTRANSLATED_DE  # the check below can tell halves apart

    def spearman(lang, rows_kept, first_lang="en"):
        a = key_vectors([f"{first_lang} first #r{i}a" for i in rows_kept])  # key_vectors reads the key only
        b = key_vectors([f"x #{'de%d' % i if lang == 'de' and i < MISTRANSLATED_DE else 'r%db' % i}" for i in rows_kept])
        return 100 * stats.spearmanr(np.sum(a * b, axis=1), gold[rows_kept]).statistic

    for lang in XSTS_LANGUAGES:
        assert rows[f"stsb dev en-{lang}"]["spearman"] == pytest.approx(spearman(lang, report))
        assert rows[f"stsb select en-{lang}"]["spearman"] == pytest.approx(spearman(lang, select))
        assert rows[f"stsb dev en-{lang}"]["size"] == len(report)
    for lang in STS_LANGUAGES:
        assert rows[f"stsb dev {lang}-{lang}"]["spearman"] == pytest.approx(spearman(lang, report, lang))
    # German's mistranslated rows move its figure: an en-en score in its place would not.
    assert abs(rows["stsb dev en-de"]["spearman"] - rows["stsb dev en-fr"]["spearman"]) > 1.0
    assert rows["tatoeba deu-eng"]["mean"] == pytest.approx((N_TATOEBA - 2) / N_TATOEBA)

    # Exact translations mine every gold pair and nothing else; Czech mines its rotated lines with the wrong partner
    # where that partner is in the pool at all.
    for lang in ("de", "fr"):
        assert rows[f"mining {lang}-en test"]["f1"] == pytest.approx(1.0)
    test = dev.mining["mining cs-en"].splits["test"]
    found = _key_pairs(test)
    assert found != test.gold
    assert rows["mining cs-en test"]["precision"] == pytest.approx(len(found & test.gold) / len(found))
    assert rows["mining cs-en test"]["recall"] == pytest.approx(len(found & test.gold) / len(test.gold))

    # News: newstest2014 lines only (the other years' would change every size), French lines 0-5 rotated.
    wrong_fr = MISTRANSLATED_FR_NEWS / N_NEWS
    for lang in NEWS_LANGUAGES:
        row = rows[f"{NEWS_DEV} en-{lang}"]
        expected = 1.0 - (wrong_fr if lang == "fr" else 0.0)
        assert row["size"] == N_NEWS and row["src->tgt"] == pytest.approx(expected) == row["tgt->src"]
        test = dev.mining[f"news mining {lang}-en"].splits["test"]
        assert all(_key(s).startswith("n") for s in test.src + test.tgt)
        assert len(test.gold) == (N_NEWS - N_NEWS // 2) // 3
        found = _key_pairs(test)
        assert (found == test.gold) == (lang == "de")
        assert rows[f"news mining {lang}-en test"]["precision"] == pytest.approx(len(found & test.gold) / len(found))
        assert rows[f"news mining {lang}-en test"]["recall"] == pytest.approx(len(found & test.gold) / len(test.gold))

    found = figures(rows)
    assert found["retrieval"] == pytest.approx(100 * (3 - wrong) / 3)
    assert found["news retrieval"] == pytest.approx(100 * (2 - wrong_fr) / 2)
    for lang in ("de", "fr"):
        assert found[f"mining {lang}"] == pytest.approx(100 * rows[f"mining {lang}-en test"]["f1"])
        assert found[f"news {lang}"] == pytest.approx(100 * rows[f"news mining {lang}-en test"]["f1"])
    assert found["news de"] == 100 > found["news fr"]
    assert found["xsts mean"] == pytest.approx(np.mean([spearman(lang, report) for lang in XSTS_LANGUAGES]))
    assert found["xsts select"] == pytest.approx(np.mean([spearman(lang, select) for lang in XSTS_LANGUAGES]))
    assert found["sts en"] == pytest.approx(spearman("en", report, "en"))
    assert found["sts mean"] == pytest.approx(np.mean([spearman(lang, report, lang) for lang in STS_LANGUAGES]))
    assert found["tatoeba"] == pytest.approx(100 * (N_TATOEBA - 2) / N_TATOEBA)
    assert found["mining f1"] == pytest.approx(np.mean([rows[f"mining {lang}-en test"]["f1"] * 100
                                                        for lang in MULTI30K_LANGUAGES]))
    assert found["mining f1"] < 100
    assert dev.summary(rows) == {f"dev/{figure}": value for figure, value in found.items()}
    flat = dev(key_vectors)  # what training logs and selects on: every row, and the figures
    assert flat["dev/xsts select"] == pytest.approx(found["xsts select"])
    assert flat["dev/mining f1"] == pytest.approx(found["mining f1"])
    assert flat["dev/news fr"] == pytest.approx(found["news fr"])
    assert flat["dev/stsb dev en-de/spearman"] == pytest.approx(rows["stsb dev en-de"]["spearman"])


def test_parts_choose_the_sets(tmp_path):
    write_dev_data(tmp_path)
    dev = MultilingualDev(str(tmp_path), parts=("xsts", "tatoeba"))
    rows = dev.evaluate(key_vectors)
    assert sorted(rows) == sorted([f"stsb {half} en-{lang}" for lang in XSTS_LANGUAGES for half in ("dev", "select")]
                                  + ["tatoeba deu-eng"])
    assert sorted(figures(rows)) == ["tatoeba", "xsts mean", "xsts select"]
    with pytest.raises(CorpusError, match=r"MultilingualDev.parts=\['bucc'\]: choose from"):
        MultilingualDev(str(tmp_path), parts=("bucc",))


def test_news_pairs_are_the_dev_set_s_lines_and_a_broken_folder_is_named(tmp_path):
    write_dev_data(tmp_path)
    newstest = tmp_path / "parallel" / "wmt_newstest"
    english, french = news_pairs(str(newstest), "fr")
    assert len(english) == len(french) == N_NEWS
    assert [_key(t) for t in english] == [f"n{i}" for i in range(N_NEWS)]
    assert _key(french[0]) == "n1" and _key(french[-1]) == f"n{N_NEWS - 1}"
    assert news_pairs(str(newstest), "de", "newstest2015")[0][0] == "en news #o15n0 said the minister on Tuesday"
    with pytest.raises(CorpusError, match=r"wmt_newstest/fr-en/origin.tsv.gz names no line of newstest2019"):
        news_pairs(str(newstest), "fr", "newstest2019")
    with gzip.open(newstest / "de-en" / "origin.tsv.gz", "wt", encoding="utf-8") as f:
        f.write("newstest2014\tx\n")
    with pytest.raises(CorpusError, match=r"de-en is not line-aligned: en 43, de 43, origin 1 lines"):
        news_pairs(str(newstest), "de")


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="../shared/data is absent")
def test_the_shared_data_give_every_set_at_its_size():
    dev = MultilingualDev(SHARED_DATA)
    assert {name: len(src) for name, (src, _) in dev.aligned.items()} == {
        "multi30k val en-de": 1014, "multi30k val en-fr": 1014, "multi30k val en-cs": 1014, "tatoeba deu-eng": 1000,
        "newstest2014 en-de": 3003, "newstest2014 en-fr": 3003}
    assert sorted(dev.sts) == sorted([f"stsb {half} en-{lang}" for lang in XSTS_LANGUAGES for half in ("dev", "select")]
                                     + [f"stsb dev {lang}-{lang}" for lang in STS_LANGUAGES])
    sizes = {len(gold) for name, (_, _, gold) in dev.sts.items() if "select" not in name}
    assert len(sizes) == 1 and abs(sizes.pop() - 750) <= 13  # halves up to one group (13 rows) apart
    assert sorted(dev.mining) == sorted([f"mining {lang}-en" for lang in MULTI30K_LANGUAGES]
                                        + [f"news mining {lang}-en" for lang in NEWS_LANGUAGES])
    for prefix, evaluator in dev.mining.items():
        threshold, test = evaluator.splits["train"], evaluator.splits["test"]
        size = 500 if prefix.startswith("news") else 169  # 3,003 lines (3,001 usable in de-en)
        assert (len(threshold.gold), len(test.gold)) == (size, size)
        assert len(threshold.src) == len(threshold.tgt) == 2 * size and len(test.src) == len(test.tgt) == 2 * size
