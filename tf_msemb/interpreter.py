"""Running Python in another process: a peer's interpreter (a venv of its own) or a measurement's own process.

Everything that runs another interpreter goes through here: the dev table's
peers (`start`: a worker that answers over a pipe), MTEB's
sentence-transformers side and the benchmark scripts' measurements
(`run_json`: one JSON object on the child's last stdout line; a process of
its own, so its peak RSS is its own). The child finds this checkout's
tf_msemb first on its `PYTHONPATH`, whether or not its interpreter has the
package installed, and imports only what its module imports (a peer venv
has no TensorFlow).
"""

import json
import os
import subprocess
import sys

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class InterpreterError(RuntimeError):
    """A child interpreter failed; the message is one line, `stderr` holds the end of what the child printed."""

    def __init__(self, message, stderr=""):
        super().__init__(message)
        self.stderr = stderr


def child_env():
    """This process' environment with this checkout first on `PYTHONPATH`."""
    path = os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return os.environ | {"PYTHONPATH": path}


def can_import(python, modules):
    """Whether `python` exists and imports every one of `modules`."""
    try:
        check = subprocess.run([python, "-c", "import " + ", ".join(modules)], capture_output=True)
    except OSError:
        return False
    return check.returncode == 0


def require(python, modules, what):
    """Raises ImportError, in one line naming `python` and `what` to install, unless it imports `modules`."""
    if not can_import(python, modules):
        raise ImportError(f"{python} cannot import {', '.join(modules)}: install {what} in that environment, or "
                          "name another interpreter.")


def _last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def run(args, what, python=None, cwd=None):
    """Runs `python args...` (default: this interpreter) to its end; its stdout.

    A failure raises `InterpreterError`: "<what> failed in <python> (status N): <the child's last stderr line>".
    """
    python = python or sys.executable
    result = subprocess.run([python, *args], capture_output=True, text=True, env=child_env(), cwd=cwd)
    if result.returncode != 0:
        raise InterpreterError(f"{what} failed in {python} (status {result.returncode}): "
                               f"{_last_line(result.stderr)}", result.stderr[-3000:])
    return result.stdout


def run_json(args, what, python=None, cwd=None):
    """`run`, and the JSON object on the last line of the child's stdout."""
    lines = run(args, what, python, cwd).strip().splitlines()
    if not lines:
        raise InterpreterError(f"{what} printed nothing in {python or sys.executable}")
    return json.loads(lines[-1])


def start(args, python=None):
    """`python args...` started with pipes to its stdin and stdout (a long-lived worker); the `Popen`."""
    return subprocess.Popen([python or sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=child_env())
