"""tf_msemb.pipelines.records under 2 worker processes: the same records as make_tfrecords, dead letters, faults."""

import collections
import gzip
import json
import os
import re
import subprocess
import sys
import types
import zipfile

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.metrics.metric import MetricsFilter

from tests.pipelines.conftest import WORKER_ARGS
from tests.pipelines.conftest import ship_by_value
from tf_msemb.data.corpora import corpus_streams
from tf_msemb.data.records import check_shards
from tf_msemb.data.readers import aligned_pairs
from tf_msemb.data.readers import moses_pairs
from tf_msemb.data.readers import tmx_pairs
from tf_msemb.data.readers import tsv_pairs
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.pipelines import records
from tf_msemb.pipelines.beam_io import run
from tf_msemb.text_files import CorpusError

EN = ["a  dog runs", "the cat", "", "the cat", "x" * 60, " two\tspaces  ", "a bird", "the cat", "same", "same"]
DE = ["ein Hund", "die Katze", "leer", "die Katze", "lang", "zwei", "ein Vogel", "die  Katze", "gleich", "anders"]
FR = ["un chien", "le chat", "vide", "le chat ", "long", "deux", "", "le chat", "pareil", "pareil"]


def _write(path, lines, zipped=False, ends=None):
    """`lines` with `\n` after each, or `ends[i]` after line i (`\r\n`, a lone `\r`: `read_lines` splits at both)."""
    data = "".join(f"{line}{ends[i] if ends else chr(10)}" for i, line in enumerate(lines)).encode("utf-8")
    with (gzip.open if zipped else open)(path, "wb") as f:
        f.write(data)
    return str(path)


def _corpus(tmp_path):
    return {"en": [_write(tmp_path / "c.en.gz", EN, zipped=True)],
            "de": [_write(tmp_path / "c.de", DE, ends=["\r\n"] * len(DE))],
            "fr": [_write(tmp_path / "c.fr", FR, ends=["\r", "\n", "\r"] + ["\n"] * (len(FR) - 3))]}


def _records_by_pair(manifest_path):
    """`{pair: Counter of serialized records}` of a corpus on disk, read as training reads it."""
    return {pair: collections.Counter(r.numpy() for r in tf.data.TFRecordDataset(files))
            for pair, (files, _) in corpus_streams(manifest_path).items()}


def _run_records(options, files, output_dir, **kwargs):
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | records.CorpusToRecords(files, str(output_dir), "c", **kwargs)
    result = pipeline.run()
    result.wait_until_finish()
    return result


def _manifest(output_dir):
    with open(os.path.join(output_dir, "c.manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def test_the_records_equal_make_tfrecords_as_multisets_and_rerun_to_the_same_bytes(tmp_path, beam_options):
    files = _corpus(tmp_path)
    _run_records(beam_options, files, tmp_path / "beam", num_shards=3, max_chars=50)
    expected = write_tfrecords(aligned_pairs({lang: paths[0] for lang, paths in files.items()}, "en"),
                               str(tmp_path / "one"), "c", 2, 50, verbose=False, drop_duplicates=True)
    beam_records = _records_by_pair(str(tmp_path / "beam" / "c.manifest.json"))
    assert beam_records == _records_by_pair(str(tmp_path / "one" / "c.manifest.json"))
    assert sum(beam_records["en-de"].values()) == 6  # 10 lines: 1 empty, 1 long, 2 duplicates (one after spaces)
    manifest = _manifest(tmp_path / "beam")
    for pair, entry in expected["pairs"].items():
        assert {k: v for k, v in manifest["pairs"][pair].items() if k != "files"} == \
               {k: v for k, v in entry.items() if k != "files"}
    assert manifest["pairs"]["en-fr"]["dropped_duplicate"] == 3 and manifest["malformed"] == 0
    first = {name: (tmp_path / "beam" / name).read_bytes() for name in os.listdir(tmp_path / "beam")}
    _run_records(beam_options, files, tmp_path / "beam", num_shards=3, max_chars=50)
    assert {name: (tmp_path / "beam" / name).read_bytes() for name in os.listdir(tmp_path / "beam")} == first


def test_tsv_rows_keep_hard_negatives_and_malformed_lines_go_to_the_dead_letters(tmp_path, beam_options):
    good = ["ein Hund\ta dog\ta cat", "die Katze\tthe cat", "die Katze\tthe cat", "leer\t "]
    path = _write(tmp_path / "p.tsv", good)
    _run_records(beam_options, {("de", "en"): [path]}, tmp_path / "beam", num_shards=2, layout="tsv")
    write_tfrecords(tsv_pairs(path, "de", "en"), str(tmp_path / "one"), "c", 1, verbose=False, drop_duplicates=True)
    assert _records_by_pair(str(tmp_path / "beam" / "c.manifest.json")) == \
           _records_by_pair(str(tmp_path / "one" / "c.manifest.json"))

    bad = tmp_path / "bad.tsv"
    bad.write_bytes("ein Hund\ta dog\nno tab here\ndie Katze\tthe cat\n".encode() + b"\xff\xfe\tbroken\n")
    result = _run_records(beam_options, {("de", "en"): [str(bad)]}, tmp_path / "dead", num_shards=2, layout="tsv")
    letters = (tmp_path / "dead" / "c.dead_letters.tsv").read_text(encoding="utf-8").splitlines()
    assert [line.split("\t")[:2] for line in letters] == [[str(bad), "2"], [str(bad), "4"]]
    assert "not UTF-8" in letters[1] and "1 tab-separated field(s)" in letters[0]
    manifest = _manifest(tmp_path / "dead")
    assert manifest["malformed"] == 2 and manifest["pairs"]["de-en"]["examples"] == 2
    counters = collections.Counter()
    for counter in result.metrics().query(MetricsFilter())["counters"]:
        counters[counter.key.metric.name] += counter.committed  # one per step that counts it
    assert counters["malformed"] == 2 and counters["examples"] == 2
    check_shards([str(tmp_path / "dead" / name) for name in manifest["pairs"]["de-en"]["files"]])


class FailingFirstAttempt(records.WriteShard):
    """Writes half of shard 1 of en-de, then raises, the first time only (a marker file spans processes)."""

    def __init__(self, *args, marker):
        super().__init__(*args)
        self.marker = marker

    def process(self, element):
        (pair, shard), _ = element
        if pair == "en-de" and shard == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            path = os.path.join(self.output_dir, f"c.en-de.tfrecord-00001-of-{self.num_shards:05d}")
            with open(path, "wb") as f:
                f.write(b"half a shard")
            raise RuntimeError("worker lost")
        yield from super().process(element)


@pytest.mark.slow
def test_a_stage_that_failed_half_way_reruns_to_every_row_once(tmp_path, beam_options, monkeypatch):
    ship_by_value(__name__)
    files = _corpus(tmp_path)
    marker = str(tmp_path / "failed-once")
    monkeypatch.setattr(records, "WriteShard", lambda *args: FailingFirstAttempt(*args, marker=marker))
    with pytest.raises(Exception, match="worker lost"):
        _run_records(beam_options, files, tmp_path / "out", num_shards=3, max_chars=50)
    assert os.path.exists(marker) and not os.path.exists(tmp_path / "out" / "c.manifest.json")
    _run_records(beam_options, files, tmp_path / "out", num_shards=3, max_chars=50)
    monkeypatch.undo()
    _run_records(beam_options, files, tmp_path / "clean", num_shards=3, max_chars=50)
    assert _records_by_pair(str(tmp_path / "out" / "c.manifest.json")) == \
           _records_by_pair(str(tmp_path / "clean" / "c.manifest.json"))
    assert sorted(os.listdir(tmp_path / "out")) == sorted(os.listdir(tmp_path / "clean"))


def _tmx(path, units):
    """A TMX file (gzip for `.gz`) of `units`, each `{xml:lang: segment markup}`."""
    body = "".join("<tu>" + "".join(f'<tuv xml:lang="{lang}"><seg>{seg}</seg></tuv>' for lang, seg in unit.items())
                   + "</tu>\n" for unit in units)
    data = f'<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header/><body>\n{body}</body></tmx>\n'
    with (gzip.open if str(path).endswith(".gz") else open)(path, "wb") as f:
        f.write(data.encode("utf-8"))
    return str(path)


def _one_pair_records(tmp_path, sources, max_chars=1000):
    """`{pair: Counter}` of `sources` (a reader's output) written by make_tfrecords' writer."""
    write_tfrecords(sources, str(tmp_path / "one"), "c", 1, max_chars, verbose=False, drop_duplicates=True)
    return _records_by_pair(str(tmp_path / "one" / "c.manifest.json"))


def test_tmx_files_give_make_tfrecords_rows_and_a_tu_without_a_side_is_a_dead_letter(tmp_path, beam_options):
    first = _tmx(tmp_path / "a.tmx.gz", [{"en-GB": "the <ph>&lt;b&gt;</ph>cat", "de-DE": "die Katze"},
                                         {"de": "ein Hund", "en": "a dog"}, {"en": "a dog", "de": "ein Hund"}])
    second = _tmx(tmp_path / "b.tmx", [{"fr": "un oiseau", "en": "a bird", "de": "ein Vogel"}])
    _run_records(beam_options, {("de", "en"): [first, second]}, tmp_path / "beam", num_shards=2, layout="tmx")
    beam_records = _records_by_pair(str(tmp_path / "beam" / "c.manifest.json"))
    rows = [row for path in (first, second) for _, _, rows in tmx_pairs(path, "de", "en") for row in rows]
    assert beam_records == _one_pair_records(tmp_path, [("de", "en", rows)])
    assert sum(beam_records["de-en"].values()) == 3  # the repeated dog dropped

    bad = _tmx(tmp_path / "bad.tmx", [{"de": "ein Hund", "en": "a dog"}, {"de": "nur Deutsch", "fr": "allemand"}])
    _run_records(beam_options, {("de", "en"): [bad]}, tmp_path / "dead", layout="tmx")
    letters = [line.split("\t") for line in
               (tmp_path / "dead" / "c.dead_letters.tsv").read_text(encoding="utf-8").splitlines()]
    assert [letter[:3] for letter in letters] == [[bad, "4", "no <tuv xml:lang='en'> segment (it has ['de', 'fr'])"]]
    assert _manifest(tmp_path / "dead")["pairs"]["de-en"]["examples"] == 1


def test_moses_zips_give_make_tfrecords_rows_and_names_read_as_aligned_files(tmp_path, beam_options):
    archive = tmp_path / "de-en.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("OPUS.de-en.de", "\n".join(DE) + "\n")
        z.writestr("OPUS.de-en.en", "\r\n".join(EN) + "\r\n")
        z.writestr("OPUS.de-en.xml", "<ids/>")
    _run_records(beam_options, {("de", "en"): [str(archive)]}, tmp_path / "beam", num_shards=2, layout="moses",
                 max_chars=50)
    beam_records = _records_by_pair(str(tmp_path / "beam" / "c.manifest.json"))
    assert beam_records == _one_pair_records(tmp_path, moses_pairs(str(archive), "de", "en"), max_chars=50)
    assert list(beam_records) == ["de-en"] and sum(beam_records["de-en"].values()) == 6  # empty, long, 2 copies

    _write(tmp_path / "x.de-en.de.gz", DE, zipped=True)
    _write(tmp_path / "x.de-en.en", EN)
    flags_ = types.SimpleNamespace(input=[], tsv=None, tmx=None, moses=str(tmp_path / "*.de-en"), src_lang="de",
                                   tgt_lang="en", pivot=None)
    assert records._inputs(flags_) == ({"de": [str(tmp_path / "x.de-en.de.gz")], "en": [str(tmp_path / "x.de-en.en")]},
                                       "aligned", "de")


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "tf_msemb.pipelines.records", *args, *WORKER_ARGS,
                           f"--output_dir={tmp_path / 'out'}"], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_an_unreadable_file_or_misaligned_files_stop_with_one_error_line(tmp_path):
    files = _corpus(tmp_path)
    broken = tmp_path / "broken.de.gz"
    broken.write_bytes(gzip.compress("\n".join(DE).encode())[:-12])
    done = _cli(tmp_path, f"--input=en:{files['en'][0]}", f"--input=de:{broken}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: Cannot read {broken}")
    short = _write(tmp_path / "short.fr", FR[:7])
    done = _cli(tmp_path, f"--input=en:{files['en'][0]}", f"--input=fr:{short}")
    assert done.returncode == 1
    assert re.fullmatch(f"error: Line counts differ: {short} has no line (8|9|10) but {files['en'][0]} has; aligned "
                        "files must match line by line.", done.stderr.strip().splitlines()[-1])
    corrupt = tmp_path / "corrupt.de.gz"
    zipped = gzip.compress("\n".join(DE).encode())
    corrupt.write_bytes(zipped[:20] + bytes(b ^ 0x5A for b in zipped[20:]))
    done = _cli(tmp_path, f"--input=en:{files['en'][0]}", f"--input=de:{corrupt}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: Cannot read {corrupt}")
    done = _cli(tmp_path, f"--input=en:{tmp_path / 'nothing*.en'}", f"--input=fr:{short}")
    assert done.stderr.strip().splitlines()[-1] == f"error: No file matches {tmp_path / 'nothing*.en'}"


def test_run_turns_a_worker_corpus_error_into_one(tmp_path, beam_options):
    pipeline = beam.Pipeline(options=beam_options)
    _ = pipeline | records.CorpusToRecords({"en": [_write(tmp_path / "a.en", EN)], "de": [_write(tmp_path / "a.de",
                                           DE[:3])]}, str(tmp_path / "o"), "c")
    with pytest.raises(CorpusError, match=r"a.de has no line ([4-9]|10) but .*a.en has"):
        run(pipeline)


def test_a_language_given_twice_is_refused_as_make_tfrecords_refuses_it(tmp_path):
    flags_ = types.SimpleNamespace(input=[f"en:{tmp_path}/a.en", f"de:{tmp_path}/a.de", f"de:{tmp_path}/b.de"],
                                   tsv=None, tmx=None, moses=None, src_lang=None, tgt_lang=None, pivot=None)
    with pytest.raises(CorpusError, match="--input gives de twice"):
        records._inputs(flags_)
