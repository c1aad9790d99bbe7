"""`tf_msemb.provenance`: files, commands and configs named without the writing machine's paths."""

import gzip
import json
import os

from tf_msemb.provenance import describe_file
from tf_msemb.provenance import file_label
from tf_msemb.provenance import portable_command
from tf_msemb.provenance import portable_config
from tf_msemb.provenance import portable_path
from tf_msemb.provenance import portable_text
from tf_msemb.provenance import portable_value


def test_paths_inside_the_working_directory_stay_relative_others_become_names(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "runs" / "exp1").mkdir(parents=True)
    monkeypatch.chdir(work)
    assert portable_path(work / "runs" / "exp1") == os.path.join("runs", "exp1")
    assert portable_path("runs/exp1") == os.path.join("runs", "exp1")
    assert portable_path(tmp_path / "elsewhere" / "e5-small") == "e5-small"
    assert portable_path(str(tmp_path / "elsewhere" / "e5-small") + os.sep) == "e5-small"
    # A sibling whose name starts like the working directory is outside it.
    assert portable_path(tmp_path / "work2" / "data.txt") == "data.txt"


def test_files_are_named_with_their_size_in_examples_or_lines(tmp_path):
    manifest = tmp_path / "train.manifest.json"
    manifest.write_text(json.dumps({"pairs": {"en-de": {"examples": 7}, "en-fr": {"examples": 5}}}))
    text = tmp_path / "val.de.gz"
    with gzip.open(text, "wt", encoding="utf-8") as f:
        f.write("a\nb\nc\n")
    assert describe_file(str(manifest)) == {"file": "train.manifest.json", "examples": 12}
    assert describe_file(text) == {"file": "val.de.gz", "lines": 3}
    assert describe_file(tmp_path / "missing.txt") == {"file": "missing.txt", "lines": None}
    assert file_label({"file": "train.de.gz", "lines": 29000}) == "train.de.gz (29,000 lines)"
    assert file_label({"file": "x.json", "examples": 12}) == "x.json (12 examples)"
    assert file_label({"file": "missing.txt", "lines": None}) == "missing.txt"


def test_commands_and_configs_keep_no_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "calib.txt").write_text("x\n")
    command = portable_command(["python", "tools/export_pretrained.py", "--model=/opt/models/e5-small",
                                "--calibration_file=runs/calib.txt", "--prompt=", "--output", "/srv/out dir"])
    assert command == ("python tools/export_pretrained.py --model=e5-small --calibration_file=runs/calib.txt "
                       "--prompt= --output 'out dir'")
    assert portable_config({"proto": "/home/u/spm.model", "sizes": [1, "/a/b.txt"], "name": "x/y"}) == {
        "proto": "spm.model", "sizes": [1, "b.txt"], "name": "x/y"}


def test_portable_text_takes_out_absolute_paths_and_keeps_tokens_and_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert portable_text("train.pretrained = '/home/me/e5'") == "train.pretrained = 'e5'"
    assert portable_text("--model=/data/runs/x (from /data/y, [/data/z])") == "--model=x (from y, [z])"
    # Tokens, relative paths and URLs are no paths of this machine: `</s>` once became `<s>`.
    for text in ("</s>", "<s> $A </s>", "runs/exp1", "https://example.org/a/b", "<2de>/x", "1/2"):
        assert portable_text(text) == text
    assert portable_value({"eos_token": "</s>", "files": ["/abs/x.model"]}) == {"eos_token": "</s>",
                                                                                 "files": ["x.model"]}
