"""`make parallel` on ../shared/data/parallel: every corpus written, the news dev set held out whole."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO
from conftest import SHARED_DATA
from conftest import cli_env
from tf_msemb.evaluation.multilingual_dev import NEWS_DEV
from tf_msemb.evaluation.multilingual_dev import NEWS_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import news_pairs

PARALLEL = os.path.join(SHARED_DATA, "parallel")
pytestmark = [pytest.mark.slow,  # about 135K + 305K + 190K + 11K pairs written: a few minutes on 2 cores
              pytest.mark.skipif(not os.path.isdir(PARALLEL), reason=f"{PARALLEL} is absent")]


def _make_variable(name):
    out = subprocess.run(["make", "-s", "--eval", f"print-{name}:\n\t@echo $({name})", f"print-{name}"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return out.strip()


def _dev_sentences(lang, held_out):
    """Both sides of the held-out test set's pairs of `lang`-en, read as the dev table reads them."""
    return set().union(*news_pairs(os.path.join(PARALLEL, "wmt_newstest"), lang, held_out))


def test_make_parallel_writes_every_corpus_and_no_news_dev_sentence(tmp_path):
    held_out = _make_variable("NEWS_DEV")
    assert held_out == NEWS_DEV  # what make holds out is what the dev table scores
    env = dict(cli_env(), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # -o: the installed venv counts as up to date (the test never reinstalls it).
    subprocess.run(["make", "-o", ".venv/.installed-base", "parallel", f"PY={sys.executable}",
                    f"PARALLEL_OUT={tmp_path}"], cwd=REPO, env=env, check=True, capture_output=True)
    manifests = {c: json.loads((tmp_path / c / f"{c}.manifest.json").read_text())
                 for c in ("news", "tatoeba", "chat", "bible")}
    assert manifests["news"]["held_out"] == [held_out] and "held_out" not in manifests["bible"]
    assert sorted(manifests["news"]["pairs"]) == [f"en-{l}" for l in ("cs", "de", "es", "fr", "it", "ru", "tr", "zh")]
    assert len(manifests["tatoeba"]["pairs"]) == 13 and list(manifests["chat"]["pairs"]) == ["en-de"]
    dev = set().union(*(_dev_sentences(lang, held_out) for lang in NEWS_LANGUAGES))
    assert len(dev) > 10000
    # The whole set is out of every language's records: its English-original half is shared by all its pairs.
    for pair, entry in manifests["news"]["pairs"].items():
        written = set()
        for name in entry["files"]:
            for record in tf.data.TFRecordDataset(str(tmp_path / "news" / name)):
                example = tf.train.Example.FromString(record.numpy())
                written.update(example.features.feature[k].bytes_list.value[0].decode() for k in ("src", "tgt"))
        assert written and not written & dev, pair
        assert entry["examples"] == sum(1 for _ in tf.data.TFRecordDataset(
            [str(tmp_path / "news" / name) for name in entry["files"]]))
