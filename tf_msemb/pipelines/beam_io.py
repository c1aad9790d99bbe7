"""What the pipelines share: deterministic keys and files, stage lines, runner options, worker errors.

A Beam runner may run a bundle more than once (a retry, a speculative copy)
and a user may rerun a pipeline that failed half-way. So every output is a
function of its input alone: keys are content hashes or input positions,
each output file is written whole (`tf_msemb.files`) under a name fixed by
its key, and a rerun overwrites instead of appending.
"""

import contextlib
import gzip
import hashlib
import logging
import re
import zlib

import apache_beam as beam
import numpy as np
import tensorflow as tf
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions

from tf_msemb.files import write_atomically
from tf_msemb.text_files import CorpusError


def stable_hash(*parts):
    """A 63-bit hash of strings that is the same in every process and run (Python's `hash` is salted)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return int.from_bytes(digest.digest(), "big") >> 1


def match_files(pattern):
    """The files a glob matches, sorted; a `CorpusError` naming the pattern when none does."""
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise CorpusError(f"No file matches {pattern}")
    return files


DEAD_LETTERS = "dead_letters"
MALFORMED = "malformed"


def dead_letter(path, number, reason, text):
    """A malformed line for the `DEAD_LETTERS` output (counted as `tf_msemb.pipelines/malformed`)."""
    Metrics.counter("tf_msemb.pipelines", MALFORMED).inc()
    return beam.pvalue.TaggedOutput(DEAD_LETTERS, (path, number, reason, repr(text)))


# What reading a damaged, truncated or missing file raises, through `opened`.
READ_ERRORS = (OSError, EOFError, zlib.error, tf.errors.OpError)


def read_error(error):
    """The reason of one of `READ_ERRORS`, as one line."""
    return getattr(error, "message", None) or str(error)


@contextlib.contextmanager
def opened(path):
    """`path` on any file system TensorFlow reads (local, gs://, ...) as a binary stream, `.gz` decompressed as
    read."""
    with tf.io.gfile.GFile(path, "rb") as raw:
        yield gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw


def _lines(stream, block=1 << 20):
    """The lines of a binary stream as `read_lines` splits them: at `\n`, `\r\n` and a lone `\r`.

    Read in blocks: `GFile`'s own line iteration drops every `\r`.
    """
    pending = b""
    while True:
        data = stream.read(block)
        if not data:
            break
        pieces = (pending + data).split(b"\n")
        pending = pieces.pop()
        for piece in pieces:
            yield from (piece[:-1] if piece.endswith(b"\r") else piece).split(b"\r")
    if pending:
        yield from (pending[:-1] if pending.endswith(b"\r") else pending).split(b"\r")


class ReadNumberedLines(beam.DoFn):
    """`(source, file index, path)` -> `((file index, line number), (source, text or None))`, lines from 1.

    Lines split as `text_files.read_lines` splits them. A line that is not
    UTF-8 gives `None` (so aligned files stay aligned) and a dead letter. A
    file that cannot be read, or is empty, stops the pipeline with a
    `CorpusError` naming it.
    """

    def process(self, element):
        source, index, path = element
        number = 0
        try:
            with opened(path) as stream:
                for number, line in enumerate(_lines(stream), start=1):
                    try:
                        text = line.decode("utf-8")
                    except UnicodeDecodeError as e:
                        yield dead_letter(path, number, f"not UTF-8 ({e.reason} at byte {e.start})", line)
                        text = None
                    yield (index, number), (source, text)
        except READ_ERRORS as e:
            raise CorpusError(f"Cannot read {path} (after line {number}): {read_error(e)}") from None
        if not number:
            raise CorpusError(f"Corpus file is empty: {path}")


class WriteDeadLetters(beam.PTransform):
    """Dead letters -> `path` (`file<TAB>line<TAB>reason<TAB>text`, in file and line order); outputs their count."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def expand(self, letters):
        return (letters
                | "All" >> beam.combiners.ToList()
                | "Write" >> beam.Map(self._write))

    def _write(self, letters):
        def write(partial):
            with tf.io.gfile.GFile(partial, "w") as f:
                f.write("".join("\t".join(map(str, letter)) + "\n" for letter in sorted(letters)))

        write_atomically(self.path, write)
        return len(letters)


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
