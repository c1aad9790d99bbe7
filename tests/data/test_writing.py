import gzip
import json

import pytest
import tensorflow as tf

from tf_msemb.data.records import parse_examples
from tf_msemb.text_files import CorpusError
from tf_msemb.data.readers import aligned_pairs
from tf_msemb.data.readers import tsv_pairs
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.data.features import HardNegatives


def _write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(data)
    else:
        path.write_text(data, encoding="utf-8")
    return str(path)


def _read_all(output_dir, manifest, pair):
    files = [str(output_dir / name) for name in manifest["pairs"][pair]["files"]]
    records = list(tf.data.TFRecordDataset(files).as_numpy_iterator())
    return parse_examples(tf.constant(records))


def test_aligned_gz_and_plain_with_drops(tmp_path):
    en = _write(tmp_path / "t.en.gz", ["one", "", "three", "x" * 50, "five"], gz=True)
    de = _write(tmp_path / "t.de", ["eins", "zwei", "drei", "vier", "  "])
    manifest = write_tfrecords(aligned_pairs({"en": en, "de": de}, "en"), str(tmp_path / "out"), "c", 2, 20, False)
    info = manifest["pairs"]["en-de"]
    assert (info["examples"], info["dropped_empty"], info["dropped_long"]) == (2, 2, 1)
    parsed = _read_all(tmp_path / "out", manifest, "en-de")
    assert sorted(parsed["src"].numpy().tolist()) == [b"one", b"three"]
    assert set(parsed["tgt_lang"].numpy().tolist()) == {b"de"}
    with open(tmp_path / "out" / "c.manifest.json") as f:
        assert json.load(f) == manifest


def test_pivot_pairs_with_each_language(tmp_path):
    files = {l: _write(tmp_path / f"x.{l}", [f"{l}{i}" for i in range(5)]) for l in ("en", "de", "fr")}
    manifest = write_tfrecords(aligned_pairs(files, "en"), str(tmp_path / "o"), "x", 3, verbose=False)
    assert sorted(manifest["pairs"]) == ["en-de", "en-fr"]
    parsed = _read_all(tmp_path / "o", manifest, "en-fr")
    assert sorted(zip(parsed["src"].numpy(), parsed["tgt"].numpy()))[0] == (b"en0", b"fr0")


def test_all_rows_dropped_is_an_error(tmp_path):
    en = _write(tmp_path / "a.en", ["", ""])
    de = _write(tmp_path / "a.de", ["x", "y"])
    with pytest.raises(CorpusError, match="nothing to train on"):
        write_tfrecords(aligned_pairs({"en": en, "de": de}, "en"), str(tmp_path / "o"), verbose=False)


def test_tsv_with_hard_negatives(tmp_path):
    path = _write(tmp_path / "p.tsv", ["Hallo\tHello\tHi\tBye", "Danke\tThanks\tThank\tNo"])
    manifest = write_tfrecords(tsv_pairs(path, "de", "en"), str(tmp_path / "o"), "p", 1, verbose=False)
    files = [str(tmp_path / "o" / f) for f in manifest["pairs"]["de-en"]["files"]]
    records = tf.constant(list(tf.data.TFRecordDataset(files).as_numpy_iterator()))
    parsed = parse_examples(records, [HardNegatives(2)])
    assert parsed["hard_negatives"].numpy().tolist() == [[b"Hi", b"Bye"], [b"Thank", b"No"]]
    bad = _write(tmp_path / "bad.tsv", ["only one field"])
    with pytest.raises(CorpusError, match=r"bad\.tsv:1"):
        list(tsv_pairs(bad, "de", "en"))


def test_two_sources_of_one_pair_are_refused_not_overwritten(tmp_path):
    first = [("en", "de", [("one", "eins")]), ("en", "de", [("two", "zwei")])]
    with pytest.raises(CorpusError, match="Two sources of the pair en-de"):
        write_tfrecords(iter(first), str(tmp_path / "o"), "t", 1, verbose=False)


@pytest.mark.parametrize("inputs, message", [
    ((("en", ["1", "2"]), ("de", ["1"])), "error: Line counts differ"),
    ((("en", ["1"]), ("de", ["1"]), ("de", ["2"])), "error: --input gives de twice"),
])
def test_cli_reports_a_clear_error(tmp_path, inputs, message):
    import subprocess
    import sys

    paths = [f"--input={lang}:{_write(tmp_path / f'{i}.{lang}', lines)}" for i, (lang, lines) in enumerate(inputs)]
    result = subprocess.run(
        [sys.executable, "tools/make_tfrecords.py", *paths, f"--output_dir={tmp_path}/o"],
        capture_output=True,
        text=True,
        cwd=__import__("conftest").REPO,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(message)


def test_whitespace_runs_become_one_space_and_duplicates_drop_only_when_asked(tmp_path):
    en = _write(tmp_path / "w.en", ["a  dog", " a dog ", "a cat", ""])
    de = _write(tmp_path / "w.de", ["ein\tHund", "ein Hund", "eine Katze", "leer"])
    kept = write_tfrecords(aligned_pairs({"en": en, "de": de}, "en"), str(tmp_path / "k"), "k", 1, verbose=False)
    dropped = write_tfrecords(aligned_pairs({"en": en, "de": de}, "en"), str(tmp_path / "d"), "d", 1, verbose=False,
                              drop_duplicates=True)
    assert kept["pairs"]["en-de"]["examples"] == 3 and kept["pairs"]["en-de"]["dropped_duplicate"] == 0
    assert dropped["pairs"]["en-de"]["examples"] == 2 and dropped["pairs"]["en-de"]["dropped_duplicate"] == 1
    records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(
        str(tmp_path / "d" / "d.en-de.tfrecord-00000-of-00001"))]
    assert [(e.features.feature["src"].bytes_list.value[0], e.features.feature["tgt"].bytes_list.value[0])
            for e in records] == [(b"a dog", b"ein Hund"), (b"a cat", b"eine Katze")]
