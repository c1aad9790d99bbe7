"""Turning the failures a user can fix into one line that names the culprit."""

import re

import tensorflow as tf

from tf_msemb.data.records import data_loss_reason
from tf_msemb.data.records import find_corrupt_shard
from tf_msemb.data.text_files import CorpusError
from tf_msemb.training.strategy import StrategyError


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


def _first_line(message):
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(message))
    return message.strip().splitlines()[0] if message.strip() else ""


def explain_data_error(error, source_files, step):
    """One line for a `tf.errors.OpError` raised while a batch was read or trained on."""
    if isinstance(error, tf.errors.DataLossError):
        found = find_corrupt_shard(source_files)
        if found:
            return f"Corrupt TFRecord shard {found[0]}: {found[1]} (rewrite it with tools/make_tfrecords.py)."
        return f"Corrupt input data at step {step}: {data_loss_reason(error)}."
    message = _first_line(error.message)
    tag = re.search(r"Unknown language tag\D*?\[?b?'?([^\]'\s]+)'?\]?.*?the tokenizer knows ([\w\- ]+)", message)
    if tag:
        return (f"Unknown language tag {tag.group(1)!r} in the corpus; the tokenizer knows {tag.group(2).strip()} "
                "(retrain it with tools/train_spm.py --languages=... or drop that pair).")
    missing = re.search(r"Feature: (\w+) \(data type: \w+\) is required but could not be found", message)
    if missing:
        return f"Input records lack the field {missing.group(1)!r} (step {step})."
    return f"Bad input at step {step}: {message}"


def one_line(error):
    """The message to print for an error the user can act on, or None for a bug (show the traceback)."""
    if isinstance(error, (CorpusError, StrategyError, NonFiniteLossError, FileNotFoundError)):
        return _first_line(error)
    if isinstance(error, tf.errors.OpError):
        return _first_line(error.message)
    if isinstance(error, ValueError):
        return _first_line(error)
    return None
