"""A corpus' TFRecords get their `teacher` feature from any export, on many workers (seed 001's teacher, run once).

    python -m tf_msemb.pipelines.teacher --model=runs/teacher_export --manifest=runs/data/web.manifest.json \
        --output_dir=runs/data_teacher [--runner=DataflowRunner ...]

What `tools/precompute_teacher.py` does on one machine, for corpora too large
for one: each distinct `src` sentence of records without a `teacher` field
is encoded once (`encode.ExportModelHandler` through `RunInference`), the
vectors are joined back onto the records, and every shard is written whole
to `output_dir` under its own name, its records in their original order.
Records that already have a teacher vector are left alone (if their width
differs from the export's, the pipeline stops naming the shard). The
manifest is copied with `"teacher": {"model", "dim"}`.
"""

if __name__ == "__main__":
    from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import json
import os

import apache_beam as beam
import tensorflow as tf
from absl import flags
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import KeyedModelHandler
from apache_beam.ml.inference.base import RunInference

from tf_msemb.data.records import data_loss_reason
from tf_msemb.data.records import text_field
from tf_msemb.data.teacher_vectors import with_teacher
from tf_msemb.data.writing import MANIFEST_SUFFIX
from tf_msemb.files import write_atomically
from tf_msemb.pipelines.beam_io import StageDone
from tf_msemb.pipelines.beam_io import run_transform
from tf_msemb.pipelines.encode import ExportModelHandler
from tf_msemb.text_files import CorpusError

NAMESPACE = "tf_msemb.teacher"


def read_corpus_manifest(path):
    """A records manifest (`make_tfrecords` or the records pipeline); a `CorpusError` naming it otherwise."""
    if not path.endswith(MANIFEST_SUFFIX) or not tf.io.gfile.exists(path):
        raise CorpusError(f"Not a corpus manifest: {path}")
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def _records(shard):
    """`(name, path)` -> `((name, position), record)` for each record of the shard."""
    name, path = shard
    try:
        for position, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
            yield (name, position), record
    except tf.errors.OpError as e:
        raise CorpusError(f"Cannot read the TFRecord shard {path}: {data_loss_reason(e)}") from None


class SplitByTeacher(beam.DoFn):
    """Records with a teacher vector go to `"done"`; the others to the main output keyed by their `src`."""

    def process(self, element):
        (name, position), record = element
        fields = tf.train.Example.FromString(record).features.feature
        if "teacher" in fields:
            Metrics.counter(NAMESPACE, "kept").inc()
            yield beam.pvalue.TaggedOutput("done", (name, (position, record, len(fields["teacher"].float_list.value))))
        else:
            yield text_field(fields), (name, position, record)


def _with_vectors(element):
    """One `src` sentence's vector and its records -> each record with the vector, keyed by shard."""
    _, grouped = element
    vector = next(iter(grouped["vector"]))
    for name, position, record in grouped["records"]:
        Metrics.counter(NAMESPACE, "added").inc()
        yield name, (position, with_teacher(record, vector), len(vector))


class WriteTeacherShard(beam.DoFn):
    """A shard's records -> the shard in `output_dir`, in their original order; emits the teacher width."""

    def __init__(self, output_dir):
        self.output_dir = output_dir

    def process(self, element):
        name, records = element
        records = sorted(records, key=lambda row: row[0])
        widths = {width for _, _, width in records}
        if len(widths) > 1:
            raise CorpusError(f"Shard {name} has teacher vectors of widths {sorted(widths)}: its records already had "
                              "some from another teacher than this export.")

        def write(partial):
            with tf.io.TFRecordWriter(partial) as writer:
                for _, record, _ in records:
                    writer.write(record)

        write_atomically(os.path.join(self.output_dir, name), write)
        yield from widths


class AddTeacherVectors(beam.PTransform):
    """A records manifest's shards -> the same shards with `teacher` vectors in `output_dir` (outputs the manifest).

    Args:
        manifest: the corpus' `<prefix>.manifest.json`.
        model: the teacher's export (a raw-string SavedModel) as workers see it.
        output_dir: where the shards and the manifest go (not the corpus' own directory).
        batch_size: sentences per export call.
    """

    def __init__(self, manifest, model, output_dir, batch_size=64):
        super().__init__()
        self.manifest_path, self.model, self.output_dir, self.batch_size = manifest, model, output_dir, batch_size
        self.manifest = read_corpus_manifest(manifest)
        source = os.path.dirname(manifest)
        if os.path.abspath(source) == os.path.abspath(output_dir):
            raise CorpusError(f"output_dir {output_dir} is the corpus' own directory; give another one.")
        self.shards = [(name, os.path.join(source, name)) for info in self.manifest["pairs"].values()
                       for name in info["files"]]

    def expand(self, pipeline):
        tf.io.gfile.makedirs(self.output_dir)
        split = (pipeline
                 | "Shards" >> beam.Create(self.shards)
                 | "Spread" >> beam.Reshuffle()
                 | "Read" >> beam.FlatMap(_records)
                 | "Split" >> beam.ParDo(SplitByTeacher()).with_outputs("done", main="missing"))
        vectors = (split.missing
                   | "Sentences" >> beam.Keys()
                   | "Distinct" >> beam.Distinct()
                   | "KeyedByText" >> beam.Map(lambda text: (text, text))
                   | "Encode" >> RunInference(KeyedModelHandler(ExportModelHandler(self.model, self.batch_size)))
                   | "Vector" >> beam.MapTuple(lambda text, result: (text, result.inference)))
        _ = vectors | StageDone("teacher", "distinct sentences encoded")
        added = ({"vector": vectors, "records": split.missing}
                 | "BySentence" >> beam.CoGroupByKey()
                 | "AddVector" >> beam.FlatMap(_with_vectors))
        every = pipeline | "EveryShard" >> beam.Create([(name, None) for name, _ in self.shards])
        widths = (({"records": (added, split.done) | beam.Flatten(), "shard": every}
                   | "ByShard" >> beam.CoGroupByKey())
                  | "Rows" >> beam.MapTuple(lambda name, grouped: (name, list(grouped["records"])))
                  | "Write" >> beam.ParDo(WriteTeacherShard(self.output_dir)))
        _ = widths | StageDone("write", "shards")
        return (widths
                | "Widths" >> beam.Distinct()
                | "Gather" >> beam.combiners.ToList()
                | "Manifest" >> beam.Map(self._write_manifest))

    def _write_manifest(self, widths):
        if len(widths) > 1:
            raise CorpusError(f"Teacher vectors of widths {sorted(widths)} in {self.manifest_path}: records that "
                              "already had one come from another teacher than this export.")
        manifest = dict(self.manifest, teacher={"model": self.model, "dim": widths[0] if widths else 0})
        path = os.path.join(self.output_dir, os.path.basename(self.manifest_path))

        def write(partial):
            with tf.io.gfile.GFile(partial, "w") as f:
                f.write(json.dumps(manifest, indent=2))

        write_atomically(path, write)
        return path


def main(argv):
    """Builds and runs the pipeline from the flags; `argv`'s leftovers are Beam's pipeline options."""
    FLAGS = flags.FLAGS
    run_transform(AddTeacherVectors(FLAGS.manifest, FLAGS.model, FLAGS.output_dir, FLAGS.batch_size), argv[1:])
    print(f"Manifest: {os.path.join(FLAGS.output_dir, os.path.basename(FLAGS.manifest))}")


def define_flags():
    """The command line's flags (defined only when it runs: absl flags are process-wide)."""
    flags.DEFINE_string("model", None, "The teacher's export (a raw-string SavedModel).")
    flags.DEFINE_string("manifest", None, "The corpus' manifest (tools/make_tfrecords.py or pipelines.records).")
    flags.DEFINE_string("output_dir", None, "Where the shards with teacher vectors and their manifest go.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per call of the export.")
    flags.mark_flags_as_required(["model", "manifest", "output_dir"])


if __name__ == "__main__":
    from tf_msemb.pipelines import teacher  # the importable module: workers unpickle its classes by name

    teacher.define_flags()
    flags.adopt_module_key_flags(teacher)  # listed by --help
    cli.run(teacher.main, beam_arguments=True)
