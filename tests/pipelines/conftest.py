"""Pipelines run as users run them here: DirectRunner's `multi_processing` mode, 2 worker processes.

Each worker is a separate Python process, so TensorFlow, tensorflow-text and
the package load there on their own, as on a cluster. Functions and classes
defined in test modules reach the workers by value (`cloudpickle`): the
workers cannot import `tests/`.
"""

import sys

import pytest
import tensorflow as tf
from apache_beam.internal import cloudpickle_pickler

from tf_msemb.pipelines.beam_io import pipeline_options

WORKER_ARGS = ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.fixture
def beam_options():
    """Options of a 2-process DirectRunner pipeline."""
    return pipeline_options(WORKER_ARGS)


def ship_by_value(module_name):
    """Lets workers unpickle what `module_name` (a test module) defines."""
    cloudpickle_pickler.cloudpickle.register_pickle_by_value(sys.modules[module_name])


@pytest.fixture(scope="session")
def export(tokenizer, tmp_path_factory):
    """A tiny random encoder's float32 export (the default packed path), 16 dims."""
    from tf_msemb.export.saved_model import export_saved_model
    from tf_msemb.models.encoder import SentenceEncoder

    tf.keras.utils.set_random_seed(3)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length)
    return export_saved_model(tokenizer, encoder, str(tmp_path_factory.mktemp("export") / "model"))
