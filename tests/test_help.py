"""Every command line's `--help` runs and prints its docstring as written (absl %-formats it: `id % shards` once
lost text to the script's path)."""

import ast
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import cli_env

ROOT = pathlib.Path(REPO)


def _commands():
    """`(argv, source path)` of every module of tf_msemb and script under tools/ that runs as a command."""
    paths = sorted(ROOT.glob("tf_msemb/**/*.py")) + sorted(ROOT.glob("tools/**/*.py"))
    for path in paths:
        if 'if __name__ == "__main__":' not in path.read_text(encoding="utf-8"):
            continue
        if path.parts[len(ROOT.parts)] == "tools":
            yield [str(path)], path
        else:
            yield ["-m", ".".join(path.relative_to(ROOT).with_suffix("").parts)], path


COMMANDS = list(_commands())


def test_the_commands_are_found():
    names = {" ".join(argv) for argv, _ in COMMANDS}
    assert {"-m tf_msemb.train", "-m tf_msemb.evaluate", "-m tf_msemb.pipelines.mine",
            "-m tf_msemb.evaluation.mteb.peer"} <= names
    assert sum(argv[0].startswith(str(ROOT / "tools")) for argv, _ in COMMANDS) >= 15


# Each command starts TensorFlow (about 7 s): three in the default suite, every one with the slow tests.
QUICK = ("-m tf_msemb.train", "-m tf_msemb.evaluate", "tools/export_pretrained.py")


@pytest.mark.parametrize("argv,path", [
    pytest.param(argv, path, marks=[] if " ".join(argv).replace(str(ROOT) + "/", "") in QUICK else [pytest.mark.slow],
                 id=" ".join(argv).replace(str(ROOT) + "/", "")) for argv, path in COMMANDS])
def test_help_prints_the_docstring_as_written(argv, path):
    source = path.read_text(encoding="utf-8")
    if "import torch" in source and importlib.util.find_spec("torch") is None:
        pytest.skip("a peer script: torch is not installed here")
    env = cli_env()
    result = subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True, cwd=REPO, env=env,
                            timeout=300)
    docstring = ast.get_docstring(ast.parse(source), clean=False)
    if "cli.run(" in source:  # absl (whose --help exits with status 1): the whole docstring, then its flags
        assert result.returncode == 1 and result.stdout, result.stderr[-3000:]
        assert docstring in result.stdout, result.stdout[:3000]
        assert re.search(r"\nflags:\n\n\S+:\n  --(\[no\])?\w", result.stdout), result.stdout[-2000:]
    else:  # argparse: the docstring's first line as the description
        assert result.returncode == 0, result.stderr[-3000:]
        # argparse rewraps it, breaking lines at spaces and hyphens
        assert "".join(docstring.splitlines()[0].split()) in "".join(result.stdout.split()), result.stdout[:3000]
    assert "Traceback" not in result.stderr
