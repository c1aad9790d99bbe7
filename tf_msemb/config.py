"""Parsing gin configs with readable errors, and the smoke-run shrink switch."""

import logging
import os

import gin

from tf_msemb import configurables  # noqa: F401  (registers every configurable)

# Applied after the recipe and --gin_param. A fresh encoder becomes tiny; a
# pretrained model (train.pretrained, a live teacher) keeps its size and
# weights, only its input is cut to 32 tokens.
SMOKE_BINDINGS = (
    "train.num_steps = 3",
    "train.global_batch_size = 8",
    "train.log_every = 1",
    "SentenceEncoder.num_layers = 1",
    "SentenceEncoder.hidden_dim = 32",
    "SentenceEncoder.num_heads = 2",
    "SentenceEncoder.intermediate_dim = 64",
    "SentencePieceTokenizer.max_length = 32",
    "WordPieceTokenizer.max_length = 32",
    "load_pretrained.max_length = 32",
    "make_dataset.max_tokens = 32",
    "make_dataset.shuffle_buffer = 64",
    "make_labeled_dataset.shuffle_buffer = 64",
)


class _IncludeProbeFilter(logging.Filter):
    """Drops gin's "Path not found" error for an include in a subfolder (`include "dev/sts.gin"`): gin first
    looks for it as a Python package resource and logs that miss, then finds the file beside the config."""

    def filter(self, record):
        probe = record.pathname.endswith(os.path.join("gin", "resource_reader.py"))
        return not (probe and record.getMessage().startswith("Path not found:"))



def parse_config(gin_files, gin_params, smoke=False):
    """Parses gin files and bindings; a bad binding becomes one readable error.

    A config's `include` lines may name files beside it (`include "ems.gin"`).
    """
    for path in gin_files:
        if not os.path.exists(path):
            raise SystemExit(f"error: gin file not found: {path}")
        gin.add_config_file_search_path(os.path.dirname(os.path.abspath(path)))
    bindings = list(gin_params) + (list(SMOKE_BINDINGS) if smoke else [])
    probe_filter = _IncludeProbeFilter()
    logging.getLogger().addFilter(probe_filter)  # gin logs on the root logger
    try:
        for path in gin_files:
            gin.parse_config_file(path)
        for binding in bindings:  # one at a time, so a malformed binding cannot swallow the next
            gin.parse_config(binding)
        gin.finalize()
    except Exception as e:  # gin raises many types (ValueError, TokenError, IOError, ...)
        message = " ".join(str(e).split())
        raise SystemExit(f"error: bad gin configuration: {message}") from None
    finally:
        logging.getLogger().removeFilter(probe_filter)
