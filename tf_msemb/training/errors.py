"""Turning the failures a user can fix into one line that names the culprit."""

import re

import tensorflow as tf

from tf_msemb.data.records import data_loss_reason
from tf_msemb.data.records import find_corrupt_shard
from tf_msemb.interpreter import InterpreterError
from tf_msemb.training.checkpointing import CheckpointError
from tf_msemb.training.strategy import StrategyError


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")


def _first_line(message):
    message = _FUNCTION_NODE.sub("", str(message)).strip()
    return message.splitlines()[0] if message else ""


# Lines of a TensorFlow runtime error that say where, not what (a tf.function's error lists its Python stack).
_BOILERPLATE = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[", 'File "')


def _core_message(message):
    """The informative line of a TensorFlow runtime error (not "Graph execution error:")."""
    failed = re.search(r"assertion failed: (.*)", message)
    if failed:
        text = failed.group(1).strip()
        # One message (an export's CPU check) loses the brackets tf.debugging.Assert puts around each of its data.
        return text[1:-1] if re.fullmatch(r"\[[^\[\]]*\]", text) else text
    for line in _FUNCTION_NODE.sub("", message).splitlines():
        line = line.strip()
        if line and not line.startswith(_BOILERPLATE):
            line = re.sub(r"^Iterator::[\w:]+: ", "", line.split(" transformation with iterator: ")[-1])
            return re.sub(r" \[Op:\w+\]", "", line)
    return _first_line(message)


def explain_data_error(error, source_files, step):
    """One line for a `tf.errors.OpError` raised while a batch was read or trained on."""
    if isinstance(error, tf.errors.DataLossError):
        found = find_corrupt_shard(source_files)
        if found:
            return f"Corrupt TFRecord shard {found[0]}: {found[1]} (rewrite it with tools/make_tfrecords.py)."
        return f"Corrupt input data at step {step}: {data_loss_reason(error)}."
    message = error.message
    tag = re.search(r"Unknown language tag\] \[b?'?([^\]']+)'?\] \[in the corpus; the run knows ([^\]]*)\]", message)
    if tag:
        return (f"Unknown language tag {tag.group(1)!r} in the corpus; the run knows {tag.group(2).strip()} "
                "(add it to EMS.languages, or leave that unset to take the manifests' tags, or drop that pair).")
    missing = re.search(r"Feature: (\w+) \(data type: \w+\) is required but could not be found", message)
    if missing:
        return f"Input records lack the field {missing.group(1)!r} (step {step})."
    return f"Bad input at step {step}: {_core_message(message)}"


def one_line(error):
    """The message to print for an error the user can act on, or None for a bug (show the traceback)."""
    if isinstance(error, tf.errors.OpError):
        return _core_message(error.message)
    # ValueError covers CorpusError and the configuration checks of constructors; ImportError a missing
    # optional package (its message says what to install); InterpreterError a peer's or a measurement's process.
    if isinstance(error, (ValueError, StrategyError, CheckpointError, NonFiniteLossError, FileNotFoundError,
                          ImportError, InterpreterError)):
        return _first_line(error)
    return None
