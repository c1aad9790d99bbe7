"""Reading line-oriented text corpora (plain or gzip) with errors that name the file."""

import gzip
import os


class CorpusError(ValueError):
    """A corpus file is missing, unreadable, empty or misaligned."""


def read_lines(path):
    """Returns the lines of a UTF-8 text file (`.gz` is decompressed), newline stripped."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CorpusError(f"Corpus file not found: {path}")
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise CorpusError(f"Cannot read {path} as UTF-8 text: {e}") from e
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise CorpusError(f"Corpus file is empty: {path}")
    return [line.rstrip("\r") for line in lines]


def unique_lines(path):
    """The distinct non-blank lines of `path`, in order of first appearance (what mining encodes)."""
    return list(dict.fromkeys(line for line in read_lines(path) if line.strip()))
