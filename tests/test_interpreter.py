"""tf_msemb.interpreter: the one way tf_msemb runs another interpreter."""

import ast
import os
import pathlib
import sys

import pytest

from conftest import REPO
from tf_msemb import interpreter


def test_run_json_returns_the_last_stdout_line_and_the_child_imports_this_checkout(tmp_path):
    script = tmp_path / "child.py"
    script.write_text("import json, tf_msemb.interpreter as i\n"
                      "print('progress')\nprint(json.dumps({'file': i.__file__}))\n", encoding="utf-8")
    # Run from another directory, the child imports this checkout's tf_msemb (PYTHONPATH), not another copy.
    reply = interpreter.run_json([str(script)], "the child", cwd=tmp_path)
    assert reply["file"] == os.path.join(REPO, "tf_msemb", "interpreter.py")


def test_a_failing_child_raises_one_line_naming_what_failed_and_keeps_its_stderr(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('half done', file=sys.stderr)\nraise SystemExit('no model at /x')\n",
                      encoding="utf-8")
    with pytest.raises(interpreter.InterpreterError) as failed:
        interpreter.run_json([str(script)], "size 10 index exact")
    assert str(failed.value) == f"size 10 index exact failed in {sys.executable} (status 1): no model at /x"
    assert "half done" in failed.value.stderr


def test_can_import_and_require_name_the_interpreter(tmp_path):
    assert interpreter.can_import(sys.executable, ["json", "numpy"])
    assert not interpreter.can_import(sys.executable, ["json", "no_such_module_here"])
    assert not interpreter.can_import(str(tmp_path / "no-python"), ["json"])
    with pytest.raises(ImportError, match=f"{sys.executable} cannot import no_such_module_here: install the thing"):
        interpreter.require(sys.executable, ["no_such_module_here"], "the thing")


def test_start_gives_a_worker_over_pipes():
    worker = interpreter.start(["-c", "import sys; print(sys.stdin.readline().upper(), end='')"])
    out, _ = worker.communicate(b"hello\n")
    assert out == b"HELLO\n" and worker.returncode == 0


def test_nothing_else_runs_another_interpreter():
    """Library code and benchmark scripts start interpreters through this module only."""
    root = pathlib.Path(REPO)
    users = []
    for path in sorted(root.glob("tf_msemb/**/*.py")) + sorted(root.glob("tools/**/*.py")):
        if path.name == "interpreter.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            if "subprocess" in names or (isinstance(node, ast.ImportFrom) and node.module == "subprocess"):
                users.append(str(path.relative_to(root)))
    assert not users, users
