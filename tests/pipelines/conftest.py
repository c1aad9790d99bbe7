"""Pipelines run as users run them here: DirectRunner's `multi_processing` mode, 2 worker processes.

Each worker is a separate Python process, so TensorFlow, tensorflow-text and
the package load there on their own, as on a cluster. Functions and classes
defined in test modules reach the workers by value (`cloudpickle`): the
workers cannot import `tests/`.
"""

import sys

import pytest
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
