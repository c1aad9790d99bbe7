"""The shared command-line behaviour (tf_msemb/cli.py): quiet start-up and one `error:` line, or the traceback."""

import os
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import cli_env
from tf_msemb.text_files import CorpusError

def run_train(model_dir, *args):
    """`python -m tf_msemb.train`, without an inherited TF_CPP_MIN_LOG_LEVEL."""
    env = cli_env()
    command = [sys.executable, "-m", "tf_msemb.train", f"--model_dir={model_dir}", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)


def test_a_missing_gin_file_is_the_only_line_printed(tmp_path):
    """Nothing else: none of TensorFlow's start-up lines (cudart_stub, cpu_feature_guard, oneDNN, cuInit, absl)."""
    result = run_train(tmp_path, "--gin_file=configs/nope.gin")
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["error: gin file not found: configs/nope.gin"], result.stderr


def test_an_error_inside_main_is_one_line_or_with_verbosity_a_traceback(tmp_path):
    binding = f"--gin_param=SentencePieceTokenizer.model_file = '{tmp_path}/missing.model'"
    quiet = run_train(tmp_path / "run", "--gin_file=configs/quickstart.gin", binding)
    assert quiet.returncode == 1
    assert quiet.stderr.splitlines() == [f"error: SentencePiece model not found: {tmp_path}/missing.model"], \
        quiet.stderr

    verbose = run_train(tmp_path / "run", "--gin_file=configs/quickstart.gin", binding, "--verbosity=1")
    assert verbose.returncode == 1
    assert "Traceback (most recent call last)" in verbose.stderr
    assert f"FileNotFoundError: SentencePiece model not found: {tmp_path}/missing.model" in verbose.stderr
    assert not any(line.startswith("error: ") for line in verbose.stderr.splitlines())


@pytest.fixture
def cli(monkeypatch):
    """tf_msemb.cli; importing it sets TF_CPP_MIN_LOG_LEVEL, which must not reach later tests' subprocesses."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    from tf_msemb import cli

    return cli


def _raise(error):
    def main(argv):
        raise error

    return main


def test_a_recognized_error_becomes_one_line_unless_verbose(cli):
    error = CorpusError("corpus.txt is empty.\nsecond line")
    with pytest.raises(SystemExit) as exit_info:
        cli.call(_raise(error), [], verbose=False)
    assert exit_info.value.code == "error: corpus.txt is empty."
    with pytest.raises(CorpusError):
        cli.call(_raise(error), [], verbose=True)


def test_an_unrecognized_error_keeps_its_traceback(cli):
    with pytest.raises(KeyError):
        cli.call(_raise(KeyError("bug")), [], verbose=False)


def test_main_runs_with_its_argv_and_returns_its_value(cli):
    assert cli.call(lambda argv: argv, ["prog"], verbose=False) == ["prog"]


@pytest.mark.parametrize("args,verbose", [
    (["--verbosity=1"], True), (["-v", "1"], True), (["--v=0"], True), (["-verbosity", "2"], True),
    (["--vmodule=x=1"], False), (["--model=v"], False), ([], False),
])
def test_verbosity_on_the_command_line_is_recognized(cli, args, verbose):
    assert cli.verbosity_requested(args) == verbose
