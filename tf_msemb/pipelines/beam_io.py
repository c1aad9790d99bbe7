"""What the pipelines share: deterministic keys and files, stage lines, runner options, worker errors.

A Beam runner may run a bundle more than once (a retry, a speculative copy)
and a user may rerun a pipeline that failed half-way. So every output is a
function of its input alone: keys are content hashes or input positions,
each output file is written whole under a temporary name and renamed to a
name fixed by its key, and a rerun overwrites instead of appending.
"""

import hashlib
import logging
import re
import uuid

import apache_beam as beam
import tensorflow as tf
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions

from tf_msemb.text_files import CorpusError


def stable_hash(*parts):
    """A 63-bit hash of strings that is the same in every process and run (Python's `hash` is salted)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return int.from_bytes(digest.digest(), "big") >> 1


def write_atomically(path, write):
    """Calls `write(temporary path)`, then renames the file to `path` (replacing a previous attempt's)."""
    partial = f"{path}.partial-{uuid.uuid4().hex}"
    try:
        write(partial)
        tf.io.gfile.rename(partial, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(partial):
            tf.io.gfile.remove(partial)


def match_files(pattern):
    """The files a glob matches, sorted; a `CorpusError` naming the pattern when none does."""
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise CorpusError(f"No file matches {pattern}")
    return files


class StageDone(beam.PTransform):
    """Prints `[pipeline] <stage>: <n> <unit>` once the stage's output is complete (a line per finished stage)."""

    def __init__(self, stage, unit):
        super().__init__(f"{stage}Done")
        self.stage, self.unit = stage, unit

    def expand(self, pcoll):
        return (pcoll
                | "Count" >> beam.combiners.Count.Globally()
                | "Print" >> beam.Map(lambda count, stage, unit: print(f"[pipeline] {stage}: {count} {unit}",
                                                                       flush=True), self.stage, self.unit))


def pipeline_options(argv):
    """Beam options from the command line's leftover arguments; DirectRunner pinned to its FnApiRunner modes.

    Without `--runner` (or with DirectRunner and no `--direct_running_mode`)
    the pipeline runs on DirectRunner's `multi_processing` mode: recent Beam
    would otherwise try the Prism runner, whose binary is downloaded at run
    time. Workers log warnings and errors only unless
    `--default_sdk_harness_log_level` says otherwise.
    """
    if not any(arg.startswith("--default_sdk_harness_log_level") for arg in argv):
        argv = [*argv, "--default_sdk_harness_log_level=WARNING"]  # workers' INFO lines, unless asked for
    options = PipelineOptions(argv)
    standard = options.view_as(StandardOptions)
    if standard.runner in (None, "DirectRunner", "direct"):
        standard.runner = "DirectRunner"
        direct = options.view_as(DirectOptions)
        if not any(arg.startswith("--direct_running_mode") for arg in argv):
            direct.direct_running_mode = "multi_processing"
    return options


_WORKER_ERROR = re.compile(r"CorpusError: (.+)")


def _not_input_error(record):
    """False for a runner's log of a worker's `CorpusError`: `run` reports it as one line instead."""
    return "CorpusError" not in record.getMessage()


def run(pipeline):
    """Runs a built pipeline to its end; a worker's `CorpusError` comes back as one (a worker reports it as text)."""
    job_log = logging.getLogger("apache_beam.runners.portability.local_job_service")
    job_log.addFilter(_not_input_error)
    try:
        pipeline.run().wait_until_finish()
    except CorpusError:
        raise
    except Exception as e:  # noqa: BLE001 -- a runner wraps worker errors in its own types
        found = _WORKER_ERROR.findall(str(e))
        if found:
            raise CorpusError(found[-1].strip().strip("'\"").replace("\\n", " ").split(" [while running")[0]) from None
        raise
    finally:
        job_log.removeFilter(_not_input_error)


def run_transform(transform, argv):
    """Runs a pipeline of the one composite `transform`, with Beam options from `argv` (a command line's leftovers)."""
    pipeline = beam.Pipeline(options=pipeline_options(argv))
    _ = pipeline | transform
    run(pipeline)
