"""What an export records of the files, commands and settings it came from, without the writing machine's paths.

An export is copied to other machines, and its metadata and model card go
with it. A file is named by its name and its size in lines or examples
(`describe_file`), a path inside the working directory relative to it and
any other by its name (`portable_path`), a command's path arguments the same
way (`portable_command`), and any other text or record that may hold one
(a gin binding, an objective's options, a gin config) has every absolute
path in it made portable (`portable_text`, `portable_value`). Below every
sub-package: it imports nothing of tf_msemb.
"""

import gzip
import json
import os
import re
import shlex


def portable_path(path):
    """`path` relative to the working directory when it lies inside it, else its base name."""
    absolute = os.path.abspath(os.fspath(path))
    cwd = os.getcwd()
    if absolute == cwd or absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, cwd)
    return os.path.basename(absolute.rstrip(os.sep)) or absolute


# An absolute (or home-relative) POSIX path inside a text: at its start or after a space, quote, `=`, `(`, `[` or
# `,` (so not inside a word, a relative path, a URL or a token such as `</s>`).
_ABSOLUTE_PATH = re.compile(r"(?<![^\s'\"=(\[,])~?/[\w.@+~-][\w.@+~/-]*")


def portable_text(text):
    """`text` with every absolute path in it made portable (`portable_path`), e.g. a gin binding
    `train.pretrained = '/home/me/e5'` becomes `train.pretrained = 'e5'`."""
    return _ABSOLUTE_PATH.sub(lambda found: portable_path(os.path.expanduser(found.group(0))), text)


def portable_value(value):
    """A nested record (dicts, lists, strings) with `portable_text` applied to every string, keys included."""
    if isinstance(value, dict):
        return {portable_value(key): portable_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable_value(item) for item in value]
    if isinstance(value, str):
        return portable_text(value)
    return value


def _count_lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(1 for _ in f)


def describe_file(path):
    """`{"file": name, "examples" | "lines": count}`: a record manifest (`data.writing`'s JSON, whose `pairs` count
    their `examples`) by its examples, any other file by its lines (None where it cannot be read)."""
    name = os.path.basename(os.fspath(path))
    try:
        if name.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                pairs = json.load(f).get("pairs", {})
            return {"file": name, "examples": sum(int(info.get("examples", 0)) for info in pairs.values())}
        return {"file": name, "lines": _count_lines(os.fspath(path))}
    except (OSError, ValueError):
        return {"file": name, "lines": None}


def file_label(record):
    """One line for a `describe_file` record, e.g. `train.de.gz (29,000 lines)`."""
    for unit in ("examples", "lines"):
        if record.get(unit) is not None:
            return f"{record['file']} ({record[unit]:,} {unit})"
    return record["file"]


def _portable_argument(argument):
    if argument.startswith("--") and "=" in argument:
        flag, value = argument.split("=", 1)
        return f"{flag}={_portable_argument(value)}" if value else argument
    if os.path.isabs(argument) or (not argument.startswith("-") and os.sep in argument and os.path.exists(argument)):
        return portable_path(argument)
    return argument


def portable_command(argv):
    """A command line (`["python", script, *args]`) as one shell string, its path arguments made portable."""
    return shlex.join([_portable_argument(argument) for argument in argv])


def portable_config(value):
    """A nested config with every absolute path replaced by its base name (an export carries its own copy of the
    file in `assets/`)."""
    if isinstance(value, dict):
        return {key: portable_config(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable_config(item) for item in value]
    if isinstance(value, str) and os.path.isabs(value):
        return os.path.basename(value.rstrip(os.sep))
    return value
