"""Reading line-oriented text corpora (plain or gzip) with errors that name the file."""

import gzip
import os


class CorpusError(ValueError):
    """A corpus file is missing, unreadable, empty or misaligned."""


def open_bytes(path):
    """`path` opened for reading bytes (`.gz` decompressed as read), or a CorpusError naming it."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CorpusError(f"Corpus file not found: {path}")
    try:
        return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    except OSError as e:
        raise CorpusError(f"Cannot read {path}: {e}") from e


def read_bytes(path):
    """The bytes of a file (`.gz` decompressed), or a CorpusError naming it."""
    with open_bytes(path) as f:
        try:
            return f.read()
        except (OSError, EOFError) as e:
            raise CorpusError(f"Cannot read {os.fspath(path)}: {e}") from e


def decode_lines(data, name):
    """UTF-8 `data` as lines, split where Python's text files split (LF, CR LF and a lone CR, the line breaks
    the Beam readers split at too); a line that is not UTF-8 is a CorpusError naming `name` and the line's number."""
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise CorpusError(f"Corpus file is empty: {name}")
    try:
        return [line.decode("utf-8") for line in lines]
    except UnicodeDecodeError:
        number = next(i for i, line in enumerate(lines, start=1) if not _is_utf8(line))
        raise CorpusError(f"{name}:{number}: not UTF-8 text") from None


def _is_utf8(line):
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_lines(path):
    """Returns the lines of a UTF-8 text file (`.gz` is decompressed), newline stripped."""
    return decode_lines(read_bytes(path), os.fspath(path))


def unique_lines(path):
    """The distinct non-blank lines of `path`, in order of first appearance (what mining encodes)."""
    return list(dict.fromkeys(line for line in read_lines(path) if line.strip()))
