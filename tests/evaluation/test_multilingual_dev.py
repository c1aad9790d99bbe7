"""The multilingual dev table (evaluation.multilingual_dev): BUCC-style pools, every figure against hand values on a
data folder of the real layout, and the real folder's sets."""

import os

import numpy as np
import pytest
from scipy import stats

from conftest import SHARED_DATA
from dev_data import KEY
from dev_data import MISTRANSLATED_CS
from dev_data import N_STS
from dev_data import N_TATOEBA
from dev_data import N_VAL
from dev_data import key_vectors
from dev_data import write_dev_data
from tf_msemb.evaluation.multilingual_dev import MULTI30K_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import XSTS_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import MultilingualDev
from tf_msemb.evaluation.multilingual_dev import bucc_style_splits
from tf_msemb.evaluation.multilingual_dev import figures
from tf_msemb.text_files import CorpusError

def test_bucc_style_pools_hide_val_pairs_among_captions_without_a_partner(tmp_path):
    write_dev_data(tmp_path)
    splits = bucc_style_splits(str(tmp_path / "multi30k"), distractors=10, seed=1)
    assert sorted(splits) == sorted(MULTI30K_LANGUAGES)
    english = {}
    for lang, (train, test) in splits.items():
        for name, split in (("train", train), ("test", test)):
            assert len(split.gold) == N_VAL and len(split.src) == len(split.tgt) == N_VAL + 10
            keys_src = [KEY.search(s).group(1) for s in split.src]
            keys_tgt = [KEY.search(s).group(1) for s in split.tgt]
            assert all(s.startswith(f"{lang} ") for s in split.src) and all(t.startswith("en ") for t in split.tgt)
            # The gold pairs are aligned lines; no other source line has its translation among the targets.
            by_id = dict(zip(split.tgt_ids, keys_tgt))
            for src_id, key in zip(split.src_ids, keys_src):
                partners = {tgt_id for tgt_id, tgt_key in by_id.items() if tgt_key == key}
                expected = set()
                if (src_id, src_id) in split.gold:  # a gold pair: g<i>, or the next rotated Czech line's
                    i = int(src_id[1:])
                    rotated = name == "test" and lang == "cs" and i < MISTRANSLATED_CS
                    expected = {f"g{(i + 1) % MISTRANSLATED_CS}" if rotated else src_id}
                assert partners == expected, (name, src_id)
            assert len(set(split.src)) == len(split.src) and len(set(split.tgt)) == len(split.tgt)
            gold_keys = keys_src[:N_VAL]
            if name == "test":
                assert set(gold_keys) == {f"v{i}" for i in range(N_VAL)}
            else:
                assert all(k.startswith("t") for k in gold_keys)
            assert all(k.startswith("t") for k in keys_src[N_VAL:] + keys_tgt[N_VAL:])
            english.setdefault(name, split.tgt)
            assert split.tgt == english[name]  # one draw: the English pools are shared by every pair
    train, test = splits["de"]
    train_keys = {KEY.search(s).group(1) for s in train.src + train.tgt}
    test_keys = {KEY.search(s).group(1) for s in test.src[N_VAL:] + test.tgt[N_VAL:]}
    assert not train_keys & test_keys  # the threshold is tuned on other captions than those of the test pools
    with pytest.raises(CorpusError, match="usable lines"):
        bucc_style_splits(str(tmp_path / "multi30k"), distractors=30)


def test_every_figure_equals_its_hand_value(tmp_path):
    gold = write_dev_data(tmp_path)
    dev = MultilingualDev(str(tmp_path), distractors=8)
    rows = dev.evaluate(key_vectors)

    wrong = MISTRANSLATED_CS / N_VAL
    for lang in MULTI30K_LANGUAGES:
        expected = 1.0 - (wrong if lang == "cs" else 0.0)
        assert rows[f"multi30k val en-{lang}"]["src->tgt"] == pytest.approx(expected)
        assert rows[f"multi30k val en-{lang}"]["tgt->src"] == pytest.approx(expected)

    def spearman(first, second):
        a, b = key_vectors(first), key_vectors(second)
        return 100 * stats.spearmanr(np.sum(a * b, axis=1), gold).statistic

    first = [f"en first #r{i}a" for i in range(N_STS)]  # key_vectors reads the key only
    seconds = {lang: [f"{lang} second #{'de%d' % i if lang == 'de' and i < 3 else 'r%db' % i}" for i in range(N_STS)]
               for lang in ("en", *XSTS_LANGUAGES)}
    for lang in XSTS_LANGUAGES:
        assert rows[f"stsb dev en-{lang}"]["spearman"] == pytest.approx(spearman(first, seconds[lang]))
    # German's mistranslated rows move its figure: an en-en score in its place would not.
    assert abs(rows["stsb dev en-de"]["spearman"] - rows["stsb dev en-fr"]["spearman"]) > 1.0
    assert rows["stsb dev de-de"]["spearman"] == pytest.approx(
        spearman([f"de first #r{i}a" for i in range(N_STS)], seconds["de"]))
    assert rows["tatoeba deu-eng"]["mean"] == pytest.approx((N_TATOEBA - 2) / N_TATOEBA)

    # Exact translations mine every gold pair and nothing else; Czech mines its rotated lines with the wrong partner.
    for lang in ("de", "fr"):
        assert rows[f"mining {lang}-en test"]["f1"] == pytest.approx(1.0)
    assert rows["mining cs-en test"]["recall"] == rows["mining cs-en test"]["precision"] == pytest.approx(1 - wrong)

    found = figures(rows)
    assert found["retrieval"] == pytest.approx(100 * (3 - wrong) / 3)
    assert found["xsts mean"] == pytest.approx(np.mean([spearman(first, seconds[lang]) for lang in XSTS_LANGUAGES]))
    assert found["sts en"] == pytest.approx(spearman(first, seconds["en"]))
    assert found["tatoeba"] == pytest.approx(100 * (N_TATOEBA - 2) / N_TATOEBA)
    assert found["mining f1"] == pytest.approx(100 * (3 - wrong) / 3)
    assert dev.summary(rows) == {f"dev/{figure}": value for figure, value in found.items()}
    flat = dev(key_vectors)  # what training logs and selects on: every row, and the figures
    assert flat["dev/xsts mean"] == pytest.approx(found["xsts mean"])
    assert flat["dev/mining f1"] == pytest.approx(found["mining f1"])
    assert flat["dev/stsb dev en-de/spearman"] == pytest.approx(rows["stsb dev en-de"]["spearman"])


def test_parts_choose_the_sets(tmp_path):
    write_dev_data(tmp_path)
    dev = MultilingualDev(str(tmp_path), parts=("xsts", "tatoeba"))
    rows = dev.evaluate(key_vectors)
    assert sorted(rows) == sorted([f"stsb dev en-{lang}" for lang in XSTS_LANGUAGES] + ["tatoeba deu-eng"])
    assert sorted(figures(rows)) == ["tatoeba", "xsts mean"]
    with pytest.raises(CorpusError, match=r"MultilingualDev.parts=\['bucc'\]: choose from"):
        MultilingualDev(str(tmp_path), parts=("bucc",))


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="../shared/data is absent")
def test_the_shared_data_give_every_set_at_its_size():
    dev = MultilingualDev(SHARED_DATA)
    assert {name: len(src) for name, (src, _) in dev.aligned.items()} == {
        "multi30k val en-de": 1014, "multi30k val en-fr": 1014, "multi30k val en-cs": 1014, "tatoeba deu-eng": 1000}
    assert sorted(dev.sts.sets) == sorted([f"stsb dev en-{lang}" for lang in XSTS_LANGUAGES]
                                          + ["stsb dev en-en", "stsb dev de-de", "stsb dev fr-fr"])
    assert all(len(gold) == 1500 for _, _, gold in dev.sts.sets.values())
    for evaluator in dev.mining.values():
        for split in evaluator.splits.values():
            assert len(split.gold) == 1014 and len(split.src) == len(split.tgt) == 4014
