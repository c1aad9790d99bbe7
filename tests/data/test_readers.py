"""Each reader against files the test writes: alignment kept, a missing side or an unreadable line one error naming
file and line."""

import gzip
import json
import subprocess
import sys
import zipfile

import pytest
import tensorflow as tf

from conftest import REPO
from conftest import cli_env
from tf_msemb.data.readers import aligned_pairs
from tf_msemb.data.readers import moses_pairs
from tf_msemb.data.readers import parallel_directory_pairs
from tf_msemb.data.readers import tmx_pairs
from tf_msemb.data.readers import tsv_pairs
from tf_msemb.text_files import CorpusError


def _write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def _rows(source):
    (pair,) = [(src, tgt, rows) for src, tgt, rows in source]
    return pair


TMX = """<?xml version="1.0" encoding="UTF-8"?>
<tmx version="1.4">
  <header srclang="de" datatype="plaintext" segtype="sentence" adminlang="en" creationtool="test" creationtoolversion="1" o-tmf="none"/>
  <body>
    <tu>
      <tuv xml:lang="de-DE"><seg>Guten <ph>&lt;b&gt;</ph>Morgen &amp; Tschüss</seg></tuv>
      <tuv xml:lang="en"><seg>Good morning &amp; bye</seg></tuv>
    </tu>
    <tu>
      <tuv lang="EN"><seg>The second,
on two lines</seg></tuv>
      <tuv lang="DE"><seg>Der zweite,
auf zwei Zeilen</seg></tuv>
    </tu>
    <tu>
      <tuv xml:lang="en"><seg></seg></tuv>
      <tuv xml:lang="de"><seg>leer auf Englisch</seg></tuv>
    </tu>
  </body>
</tmx>
"""


def test_tmx_sides_by_language_not_position_inline_codes_left_out(tmp_path):
    for gz in (False, True):
        path = tmp_path / f"c.tmx{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(TMX.encode()) if gz else TMX.encode())
        src, tgt, rows = _rows(tmx_pairs(str(path), "de", "en"))
        # The second unit lists English first; TMX 1.1's `lang` and region tags match; <ph>'s markup is no text; a
        # blank side stays for clean_row to drop and count.
        assert (src, tgt) == ("de", "en")
        assert rows == [("Guten Morgen & Tschüss", "Good morning & bye"),
                        ("Der zweite,\nauf zwei Zeilen", "The second,\non two lines"), ("leer auf Englisch", "")]


def test_tmx_a_unit_without_the_language_or_broken_xml_names_file_and_line(tmp_path):
    path = tmp_path / "c.tmx"
    path.write_text(TMX.replace('<tuv lang="DE">', '<tuv lang="FR">'), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"c\.tmx:9: this <tu> has no <tuv xml:lang='de'> segment.*'EN', 'FR'"):
        list(tmx_pairs(str(path), "de", "en"))
    path.write_text(TMX.replace("</seg></tuv>\n    </tu>\n    <tu>\n      <tuv lang", "</tuv>\n    </tu>\n    <tu>\n"
                                "      <tuv lang", 1), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"c\.tmx:7: not well-formed TMX \(mismatched tag\)"):
        list(tmx_pairs(str(path), "de", "en"))
    (tmp_path / "bad.tmx.gz").write_bytes(b"not gzip at all")
    with pytest.raises(CorpusError, match=r"Cannot read .*bad\.tmx\.gz"):
        list(tmx_pairs(str(tmp_path / "bad.tmx.gz"), "de", "en"))


def test_moses_files_and_opus_zip(tmp_path):
    _write(tmp_path / "Corpus.de-en.de", ["Hallo", "Zwei"])
    _write(tmp_path / "Corpus.de-en.en.gz", ["Hello", "Two"], gz=True)
    assert _rows(moses_pairs(str(tmp_path / "Corpus.de-en"), "de", "en")) == (
        "de", "en", [("Hallo", "Hello"), ("Zwei", "Two")])
    archive = tmp_path / "de-en.txt.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("README", "OPUS")
        z.writestr("LICENSE", "CC-BY")
        z.writestr("Corpus.de-en.en", "Hello\nTwo\nThree\n")
        z.writestr("Corpus.de-en.de", "Hallo\nZwei\nDrei\n")
        z.writestr("Corpus.de-en.xml", "<ids/>")
    assert _rows(moses_pairs(str(archive), "en", "de"))[2] == [("Hello", "Hallo"), ("Two", "Zwei"), ("Three", "Drei")]
    with pytest.raises(CorpusError, match=r"de-en\.txt\.zip: expected one file ending in \.fr"):
        list(moses_pairs(str(archive), "en", "fr"))
    _write(tmp_path / "Short.de", ["Hallo"])
    _write(tmp_path / "Short.en", ["Hello", "Two"])
    with pytest.raises(CorpusError, match=r"Short\.de has 1 lines, .*Short\.en has 2"):
        list(moses_pairs(str(tmp_path / "Short"), "de", "en"))
    with pytest.raises(CorpusError, match=r"Corpus\.de-en\.fr or .*Corpus\.de-en\.fr\.gz"):
        list(moses_pairs(str(tmp_path / "Corpus.de-en"), "de", "fr"))


def test_a_line_that_is_not_utf8_is_named_with_its_number(tmp_path):
    (tmp_path / "x.de").write_bytes("eins\nzwei\nStra\xdfe\n".encode("latin-1"))
    _write(tmp_path / "x.en", ["one", "two", "street"])
    with pytest.raises(CorpusError, match=r"x\.de:3: not UTF-8"):
        list(moses_pairs(str(tmp_path / "x"), "de", "en"))
    (tmp_path / "p.tsv").write_bytes(b"a\tb\nc\td\n\xff\te\n")
    with pytest.raises(CorpusError, match=r"p\.tsv:3: not UTF-8"):
        list(tsv_pairs(str(tmp_path / "p.tsv"), "de", "en"))
    (tmp_path / "nl.tsv").write_bytes(b"a\tb\r\nc\td\re\tf\n")  # CR LF and a lone CR end lines, as in text files
    assert _rows(tsv_pairs(str(tmp_path / "nl.tsv"), "de", "en"))[2] == [("a", "b"), ("c", "d"), ("e", "f")]


def _corpus(root):
    """A `<xx>-en/` corpus of two languages, the last pair of each from a held-out test set."""
    for lang, lines in {"de": ["Eins", "Zwei", "Drei"], "fr": ["Un", "Deux", "Trois"]}.items():
        directory = root / f"{lang}-en"
        directory.mkdir(parents=True)
        _write(directory / f"{lang}.txt.gz", lines, gz=True)
        _write(directory / "en.txt.gz", ["One", "Two", "Three"], gz=True)
        _write(directory / "origin.tsv.gz", ["set2017\tx", "set2017\tx", "set2018\tx"], gz=True)
    return str(root)


def test_a_corpus_directory_holds_out_whole_origins(tmp_path):
    corpus = _corpus(tmp_path / "news")
    pairs = list(parallel_directory_pairs(corpus, held_out=["set2018"]))
    assert pairs == [("en", "de", [("One", "Eins"), ("Two", "Zwei")]), ("en", "fr", [("One", "Un"), ("Two", "Deux")])]
    assert [lang for _, lang, _ in parallel_directory_pairs(corpus, languages=["fr"])] == ["fr"]
    assert len(list(parallel_directory_pairs(corpus))[0][2]) == 3
    with pytest.raises(CorpusError, match=r"no <xx>-en/ directory for \['ja'\] \(found \['de', 'fr'\]\)"):
        list(parallel_directory_pairs(corpus, languages=["ja"]))
    _write(tmp_path / "news" / "de-en" / "origin.tsv.gz", ["set2017"], gz=True)
    with pytest.raises(CorpusError, match=r"origin\.tsv\.gz has 1 lines"):
        list(parallel_directory_pairs(corpus))


def _make_records(args, tmp_path):
    return subprocess.run([sys.executable, f"{REPO}/tools/make_tfrecords.py", f"--output_dir={tmp_path}/out",
                           "--prefix=c", "--num_shards=1", *args], capture_output=True, text=True, env=cli_env())


def test_cli_writes_a_corpus_directory_without_its_held_out_sets_and_says_so(tmp_path):
    result = _make_records([f"--parallel_dir={_corpus(tmp_path / 'news')}", "--held_out=set2018"], tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "out" / "c.manifest.json").read_text())
    assert manifest["held_out"] == ["set2018"] and sorted(manifest["pairs"]) == ["en-de", "en-fr"]
    records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(
        str(tmp_path / "out" / "c.en-de.tfrecord-00000-of-00001"))]
    assert [e.features.feature["src"].bytes_list.value[0] for e in records] == [b"One", b"Two"]


def test_cli_reads_tmx_and_errors_in_one_line(tmp_path):
    (tmp_path / "c.tmx").write_text(TMX, encoding="utf-8")
    result = _make_records([f"--tmx={tmp_path}/c.tmx", "--src_lang=de", "--tgt_lang=en"], tmp_path)
    assert result.returncode == 0, result.stderr
    pairs = json.loads((tmp_path / "out" / "c.manifest.json").read_text())["pairs"]["de-en"]
    assert (pairs["examples"], pairs["dropped_empty"]) == (2, 1)
    (tmp_path / "bad.tmx").write_text(TMX.replace('<tuv lang="DE">', '<tuv lang="FR">'), encoding="utf-8")
    results = [_make_records(args, tmp_path) for args in (
        [f"--tmx={tmp_path}/bad.tmx", "--src_lang=de", "--tgt_lang=en"],
        [f"--tmx={tmp_path}/c.tmx"],
        [f"--tmx={tmp_path}/c.tmx", f"--tsv={tmp_path}/c.tsv", "--src_lang=de", "--tgt_lang=en"])]
    errors = [result.stderr for result in results]
    for result, stderr in zip(results, errors):
        assert result.returncode == 1 and stderr.strip().splitlines()[-1].startswith("error: ") \
            and "Traceback" not in stderr, stderr[-2000:]
    assert "bad.tmx:9" in errors[0] and "--tmx needs --src_lang" in errors[1] and "not --tsv and --tmx" in errors[2]


def test_mismatched_line_counts_name_both_files(tmp_path):
    en = _write(tmp_path / "a.en", ["1", "2", "3"])
    de = _write(tmp_path / "a.de", ["1", "2"])
    with pytest.raises(CorpusError, match=r"a\.en has 3 lines.*a\.de has 2"):
        list(aligned_pairs({"en": en, "de": de}, "en"))


def test_empty_missing_and_unreadable_files(tmp_path):
    en = _write(tmp_path / "a.en", ["1"])
    (tmp_path / "empty.de").write_text("")
    with pytest.raises(CorpusError, match=r"empty\.de"):
        list(aligned_pairs({"en": en, "de": str(tmp_path / "empty.de")}, "en"))
    with pytest.raises(CorpusError, match=r"missing\.de"):
        list(aligned_pairs({"en": en, "de": str(tmp_path / "missing.de")}, "en"))
    (tmp_path / "bad.gz").write_bytes(b"not gzip at all")
    with pytest.raises(CorpusError, match=r"bad\.gz"):
        list(aligned_pairs({"en": en, "de": str(tmp_path / "bad.gz")}, "en"))
    (tmp_path / "latin1.de").write_bytes("Stra\xdfe\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin1\.de"):
        list(aligned_pairs({"en": en, "de": str(tmp_path / "latin1.de")}, "en"))


