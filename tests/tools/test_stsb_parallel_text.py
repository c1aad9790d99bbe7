"""tools/stsb_parallel_text.py: STS-b rows in several languages become line-aligned parallel text, each English
sentence once, dev sentences left out; its files feed make_tfrecords."""

import json
import os
import subprocess
import sys

from conftest import REPO

ROWS = {  # sentence 1, sentence 2 of each train row, per language
    "en": [("A man plays.", "A dog runs."), ("A dog runs.", "The cat sleeps."), ("Dev sentence.", "A bird sings.")],
    "de": [("Ein Mann spielt.", "Ein Hund rennt."), ("Ein Hund läuft.", "Die Katze schläft."),
           ("Dev-Satz.", "Ein Vogel singt.")],
    "ja": [("男が遊ぶ。", "犬が走る。"), ("犬が走っている。", "猫が寝る。"), ("開発文。", "鳥が歌う。")],
}


def write_stsb(directory):
    for lang, rows in ROWS.items():
        (directory / f"stsb-{lang}-train.csv").write_text(
            "".join(f'"{a}","{b}",{i}.0\n' for i, (a, b) in enumerate(rows)), encoding="utf-8")
    (directory / "stsb-en-dev.csv").write_text('"Dev sentence.","Other.",2.0\n', encoding="utf-8")


def test_rows_become_aligned_lines_each_english_sentence_once_without_dev_sentences(tmp_path):
    write_stsb(tmp_path)
    out = tmp_path / "text"
    tool = os.path.join(REPO, "tools", "stsb_parallel_text.py")
    result = subprocess.run([sys.executable, tool, f"--stsb_dir={tmp_path}", "--languages=de,ja",
                             f"--output_dir={out}"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = {lang: (out / f"stsb.train.{lang}.txt").read_text(encoding="utf-8").splitlines() for lang in ROWS}
    # Sentences 1 of the rows, then sentences 2; "A dog runs." comes twice: its first translation is kept.
    assert lines["en"] == ["A man plays.", "A dog runs.", "The cat sleeps.", "A bird sings."]
    assert lines["de"] == ["Ein Mann spielt.", "Ein Hund läuft.", "Die Katze schläft.", "Ein Vogel singt."]
    assert lines["ja"] == ["男が遊ぶ。", "犬が走っている。", "猫が寝る。", "鳥が歌う。"]
    assert "1 English sentences of the dev split left out" in result.stdout

    records = subprocess.run([sys.executable, os.path.join(REPO, "tools", "make_tfrecords.py"),
                              *[f"--input={lang}:{out}/stsb.train.{lang}.txt" for lang in ROWS], "--pivot=en",
                              f"--output_dir={tmp_path / 'records'}", "--prefix=stsb"],
                             capture_output=True, text=True, cwd=REPO)
    assert records.returncode == 0, records.stderr[-2000:]
    manifest = json.loads((tmp_path / "records" / "stsb.manifest.json").read_text())
    assert {pair: info["examples"] for pair, info in manifest["pairs"].items()} == {"en-de": 4, "en-ja": 4}


def test_an_empty_exclude_split_keeps_every_sentence_and_says_so(tmp_path):
    write_stsb(tmp_path)
    out = tmp_path / "text"
    result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "stsb_parallel_text.py"),
                             f"--stsb_dir={tmp_path}", "--languages=de", "--exclude_split=", f"--output_dir={out}"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / "stsb.train.en.txt").read_text(encoding="utf-8").splitlines() == [
        "A man plays.", "A dog runs.", "Dev sentence.", "The cat sleeps.", "A bird sings."]
    assert result.stdout.strip().endswith("(no split left out)")


def test_row_counts_that_differ_end_in_one_error_line(tmp_path):
    write_stsb(tmp_path)
    (tmp_path / "stsb-ja-train.csv").write_text('"a","b",1.0\n', encoding="utf-8")
    result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "stsb_parallel_text.py"),
                             f"--stsb_dir={tmp_path}", "--languages=de,ja", f"--output_dir={tmp_path / 'o'}"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: stsb-<lang>-train.csv in")
