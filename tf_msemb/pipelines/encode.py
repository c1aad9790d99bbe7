"""Any raw-string export over a text corpus: sharded vectors with sentence ids, resumable shard by shard.

    python -m tf_msemb.pipelines.encode --model=runs/distill/export/final --input='news/*.de.gz' \
        --output_dir=runs/encoded/de --num_shards=64 [--dtype=float16] [--runner=DataflowRunner ...]

Blank lines are skipped (lines that are not UTF-8 go to `dead_letters.tsv`
with their file and line number), and each distinct line is encoded once, under the id
of its first occurrence: `file index * 2**40 + line number` over the sorted
files of the glob (so an id says where the sentence is, and a rerun gives
the same ids). Sentence `id` goes to shard `id % num_shards`; each shard is
one `.npz` (`read_shard`) with the ids in order, their vectors (`--dtype`)
and texts, written whole and renamed, and `encoded.json` lists the shards.

A shard is encoded by one worker as a unit (`EncodeShard`, its sentences
sorted by length so each call pads little), so a run that was stopped and
started again with the same command encodes only the shards not yet
written; `encode.settings.json` records the corpus, model, shards and
dtype, and an output directory holding another run's shards is refused.

`ExportModelHandler` (also `RunInference`'s, in the teacher pipeline) loads
the export with `tf.saved_model.load` after importing `tensorflow_text` in
the worker (Beam's stock TensorFlow handler loads through
`keras.models.load_model`, which Keras 3 refuses for a plain SavedModel:
apache/beam#30616) and calls its `serving_default` signature.
"""

if __name__ == "__main__":
    from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import json
import os

import apache_beam as beam
import numpy as np
import tensorflow as tf
from absl import flags
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler
from apache_beam.ml.inference.base import PredictionResult
from apache_beam.utils import shared

from tf_msemb.export.saved_model import check_loadable
from tf_msemb.files import read_npz
from tf_msemb.files import write_json_atomically
from tf_msemb.files import write_npz_atomically
from tf_msemb.pipelines.beam_io import DEAD_LETTERS
from tf_msemb.pipelines.beam_io import MALFORMED
from tf_msemb.pipelines.beam_io import ReadNumberedLines
from tf_msemb.pipelines.beam_io import StageDone
from tf_msemb.pipelines.beam_io import WriteDeadLetters
from tf_msemb.pipelines.beam_io import match_files
from tf_msemb.pipelines.beam_io import run_transform
from tf_msemb.text_files import CorpusError

NAMESPACE = "tf_msemb.encode"
MANIFEST = "encoded.json"
SETTINGS = "encode.settings.json"
DTYPES = ("float32", "float16")
LINES_PER_FILE = 2**40


def sentence_id(file_index, line_number):
    """The id of line `line_number` (from 1) of the `file_index`-th file."""
    return file_index * LINES_PER_FILE + line_number


def shard_name(shard, num_shards):
    return f"vectors-{shard:05d}-of-{num_shards:05d}.npz"


def write_shard(path, ids, vectors, texts):
    """Writes one shard (`read_shard`'s format) whole under a temporary name, then renames it to `path`."""
    write_npz_atomically(path, ids=np.asarray(ids, np.int64), vectors=vectors,
                         texts=np.frombuffer("\n".join(texts).encode("utf-8"), np.uint8))


def write_manifest(directory, manifest):
    """Writes `encoded.json` (shard names, sentence count, dim, dtype, model) whole."""
    write_json_atomically(os.path.join(directory, MANIFEST), manifest, indent=1)


def read_shard(path):
    """`(ids [n] int64, vectors [n, d], texts)` of one encoded shard."""
    try:
        arrays = read_npz(path)
        texts = arrays["texts"].tobytes().decode("utf-8").split("\n") if len(arrays["ids"]) else []
        return arrays["ids"], arrays["vectors"], texts
    except (OSError, ValueError, KeyError, tf.errors.OpError) as e:
        raise CorpusError(f"Cannot read the vector shard {path}: {getattr(e, 'message', None) or e}") from None


def read_manifest(directory):
    """The `encoded.json` of an encode pipeline's output directory (a `CorpusError` naming it when absent)."""
    path = os.path.join(directory, MANIFEST)
    if not tf.io.gfile.exists(path):
        raise CorpusError(f"No {MANIFEST} in {directory}: is it the output_dir of tf_msemb.pipelines.encode?")
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def shard_paths(directory):
    """The shard files an encoded corpus' manifest lists."""
    return [os.path.join(directory, name) for name in read_manifest(directory)["shards"]]


class _Signature:
    """A loaded serving signature and its input and output names (an object: Beam shares models by weak reference)."""

    def __init__(self, function, input_key, output_key):
        self.function, self.input_key, self.output_key = function, input_key, output_key

    def __call__(self, strings):
        return self.function(**{self.input_key: strings})[self.output_key].numpy()


class ExportModelHandler(ModelHandler):
    """`RunInference` over a raw-string SavedModel's `serving_default`: strings in, one vector each out.

    Args:
        path: the export (any SavedModel whose serving signature maps one
            string tensor to one `[b, d]` tensor).
        batch_size: sentences per call of the signature; each batch Beam
            hands over (up to `batch_size * sub_batches`) is sorted by length
            first, so a call pads little.
    """

    def __init__(self, path, batch_size=64, sub_batches=16):
        super().__init__(min_batch_size=batch_size, max_batch_size=batch_size * sub_batches)
        self.path, self.batch_size = path, batch_size

    def load_model(self):
        import tensorflow_text  # noqa: F401 -- registers the export's tokenizer ops in this worker

        check_loadable(self.path)
        signature = tf.saved_model.load(self.path).signatures["serving_default"]
        inputs = signature.structured_input_signature[1]
        outputs = signature.structured_outputs
        if len(inputs) != 1 or len(outputs) != 1:
            raise CorpusError(f"The serving_default signature of {self.path} takes {sorted(inputs)} and returns "
                              f"{sorted(outputs)}; one string input and one vector output are needed.")
        return _Signature(signature, next(iter(inputs)), next(iter(outputs)))

    def run_inference(self, batch, model, inference_args=None):
        order = np.argsort([len(text) for text in batch], kind="stable")
        vectors = [None] * len(batch)
        for start in range(0, len(batch), self.batch_size):
            rows = order[start : start + self.batch_size]
            encoded = model(tf.constant([batch[i] for i in rows]))
            for row, vector in zip(rows, encoded):
                vectors[row] = vector
        Metrics.counter(NAMESPACE, "sentences").inc(len(batch))
        return [PredictionResult(text, vector) for text, vector in zip(batch, vectors)]

    def get_num_bytes(self, batch):
        return sum(len(text.encode("utf-8")) for text in batch)


class EncodeShard(beam.DoFn):
    """`(shard, [(id, text)])` -> the shard's `.npz`, ids in order; emits `(shard, count, dim)`.

    A shard already written (by an earlier run of the same settings) is
    counted, not encoded again. The export is loaded once per worker
    process (Beam's `Shared`), when its first shard needs it.
    """

    def __init__(self, handler, output_dir, num_shards, dtype):
        self.handler, self.output_dir, self.num_shards, self.dtype = handler, output_dir, num_shards, dtype
        self._model = shared.Shared()

    def process(self, element):
        shard, rows = element
        path = os.path.join(self.output_dir, shard_name(shard, self.num_shards))
        if tf.io.gfile.exists(path):
            ids, vectors, _ = read_shard(path)
            Metrics.counter(NAMESPACE, "resumed_shards").inc()
            yield shard, len(ids), vectors.shape[1]
            return
        rows = sorted(rows)
        texts = [text for _, text in rows]
        vectors = np.zeros((0, 0))
        if rows:
            results = self.handler.run_inference(texts, self._model.acquire(self.handler.load_model))
            vectors = np.stack([result.inference for result in results])
        write_shard(path, [id_ for id_, _ in rows], vectors.astype(self.dtype), texts)
        yield shard, len(rows), vectors.shape[1]


class WriteEncodedManifest(beam.DoFn):
    """Every shard's `(shard, count, dim)` -> `encoded.json` (shards, sentences, dim, dtype, model, malformed lines)."""

    def __init__(self, output_dir, num_shards, dtype, model):
        self.output_dir, self.num_shards, self.dtype, self.model = output_dir, num_shards, dtype, model

    def process(self, shards, malformed):
        dims = {dim for _, count, dim in shards if count}
        manifest = {"shards": [shard_name(i, self.num_shards) for i in range(self.num_shards)],
                    "sentences": sum(count for _, count, _ in shards), "dim": max(dims, default=0),
                    "dtype": self.dtype, "model": self.model, MALFORMED: malformed,
                    DEAD_LETTERS: f"{DEAD_LETTERS}.tsv"}
        write_manifest(self.output_dir, manifest)
        yield manifest


def check_settings(output_dir, settings):
    """Records an encode run's settings in `output_dir`; a directory holding another run's shards is refused."""
    path = os.path.join(output_dir, SETTINGS)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            if json.load(f) == settings:
                return
        raise CorpusError(f"{output_dir} holds vectors of another corpus, model, shard count or dtype ({path}); "
                          "remove it or pass another --output_dir")
    if tf.io.gfile.exists(output_dir) and any(name.startswith("vectors-") for name in tf.io.gfile.listdir(output_dir)):
        raise CorpusError(f"{output_dir} holds vector shards but no {SETTINGS}; remove it or pass another "
                          "--output_dir")
    tf.io.gfile.makedirs(output_dir)
    write_json_atomically(path, settings)


def _first_occurrence(element):
    (index, number), (_, text) = element
    if text is not None and text.strip():
        yield text, sentence_id(index, number)


class EncodeCorpus(beam.PTransform):
    """Text files -> `num_shards` vector shards of their distinct lines in `output_dir` (outputs the manifest).

    Args:
        files: the corpus' files, in the order that numbers them.
        model: the export's path (as the workers see it).
        dtype: `"float16"` or `"float32"` storage.
        batch_size: sentences per export call.
    """

    def __init__(self, files, model, output_dir, num_shards=16, dtype="float16", batch_size=64):
        super().__init__()
        if dtype not in DTYPES:
            raise ValueError(f"Unknown dtype {dtype!r}; choose from {DTYPES}.")
        self.files, self.model, self.output_dir = files, model, output_dir
        self.num_shards, self.dtype, self.batch_size = num_shards, dtype, batch_size

    def expand(self, pipeline):
        check_settings(self.output_dir, {"files": list(self.files), "model": self.model,
                                         "num_shards": self.num_shards, "dtype": self.dtype})
        lines = (pipeline
                 | "Files" >> beam.Create([("text", i, path) for i, path in enumerate(self.files)])
                 | "Spread" >> beam.Reshuffle()
                 | "Read" >> beam.ParDo(ReadNumberedLines()).with_outputs(DEAD_LETTERS, main="lines"))
        malformed = lines[DEAD_LETTERS] | "DeadLetterFile" >> WriteDeadLetters(
            os.path.join(self.output_dir, f"{DEAD_LETTERS}.tsv"))
        sentences = (lines.lines
                     | "NonBlank" >> beam.FlatMap(_first_occurrence)
                     | "Distinct" >> beam.CombinePerKey(min)
                     | "ById" >> beam.KvSwap())
        _ = sentences | StageDone("distinct", "sentences")
        every = pipeline | "EveryShard" >> beam.Create([(i, None) for i in range(self.num_shards)])
        handler = ExportModelHandler(self.model, self.batch_size)
        written = ({"rows": sentences | "ToShard" >> beam.Map(lambda row, n: (row[0] % n, row), self.num_shards),
                    "shard": every}
                   | "ByShard" >> beam.CoGroupByKey()
                   | "Rows" >> beam.MapTuple(lambda shard, grouped: (shard, list(grouped["rows"])))
                   | "Encode" >> beam.ParDo(EncodeShard(handler, self.output_dir, self.num_shards, self.dtype)))
        _ = written | StageDone("encode", "shards")
        return (written
                | "Gather" >> beam.combiners.ToList()
                | "Manifest" >> beam.ParDo(WriteEncodedManifest(self.output_dir, self.num_shards, self.dtype,
                                                                self.model), beam.pvalue.AsSingleton(malformed)))


def main(argv):
    """Builds and runs the pipeline from the flags; `argv`'s leftovers are Beam's pipeline options."""
    FLAGS = flags.FLAGS
    run_transform(EncodeCorpus(match_files(FLAGS.input), FLAGS.model, FLAGS.output_dir, FLAGS.num_shards,
                               FLAGS.dtype, FLAGS.batch_size), argv[1:])
    print(f"Vectors: {os.path.join(FLAGS.output_dir, MANIFEST)}")


def define_flags():
    """The command line's flags (defined only when it runs: absl flags are process-wide)."""
    flags.DEFINE_string("model", None, "The export (a raw-string SavedModel) to encode with.")
    flags.DEFINE_string("input", None, "A glob of text files, one sentence a line (plain or .gz).")
    flags.DEFINE_string("output_dir", None, "Where the vector shards and encoded.json go.")
    flags.DEFINE_integer("num_shards", 16, "Vector shards.")
    flags.DEFINE_enum("dtype", "float16", list(DTYPES), "Storage type of the vectors.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per call of the export.")
    flags.mark_flags_as_required(["model", "input", "output_dir"])


if __name__ == "__main__":
    from tf_msemb.pipelines import encode  # the importable module: workers unpickle its classes by name

    encode.define_flags()
    flags.adopt_module_key_flags(encode)  # listed by --help
    cli.run(encode.main, beam_arguments=True)
