"""Text corpora to sharded TFRecords plus manifest, as a Beam pipeline (what `tools/make_tfrecords.py` does on one machine).

    python -m tf_msemb.pipelines.records --input='en:corpus/*.en.gz' --input='de:corpus/*.de.gz' \
        --output_dir=runs/data --prefix=web [--runner=DataflowRunner ...]

Line-aligned files (one glob per language; the i-th file of each glob are
aligned line by line) pair the pivot language with every other, or TSV
files give `src<TAB>tgt[<TAB>hard negative ...]` rows. Rows are cleaned and
length-filtered by `data.writing.clean_row`, exact duplicate rows of a
language pair are dropped, and the rest are serialized by
`data.writing.serialize_rows` into `<prefix>.<pair>.tfrecord-0000i-of-0000n`
shards, the names and schema `make_dataset` reads. A row's shard is a hash of
its content and each shard is written whole, sorted, under a temporary name,
so a retried or rerun stage rewrites the same files. Each shard passes
`check_shards` once written. Drops are Beam counters and manifest fields
(`dropped_empty`, `dropped_long`, `dropped_duplicate`, and the corpus'
`malformed` lines, which go to `<prefix>.dead_letters.tsv` as
`file<TAB>line<TAB>reason<TAB>text`).
"""

if __name__ == "__main__":
    from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import collections
import os

import apache_beam as beam
import tensorflow as tf
from absl import flags
from apache_beam.metrics import Metrics

from tf_msemb.data.records import check_shards
from tf_msemb.data.writing import clean_row
from tf_msemb.data.writing import new_manifest
from tf_msemb.data.writing import pair_entry
from tf_msemb.data.writing import serialize_rows
from tf_msemb.data.writing import shard_files
from tf_msemb.data.writing import write_manifest
from tf_msemb.files import write_atomically
from tf_msemb.models.pretrained import load_tokenizer
from tf_msemb.pipelines.beam_io import DEAD_LETTERS
from tf_msemb.pipelines.beam_io import MALFORMED
from tf_msemb.pipelines.beam_io import ReadNumberedLines
from tf_msemb.pipelines.beam_io import StageDone
from tf_msemb.pipelines.beam_io import WriteDeadLetters
from tf_msemb.pipelines.beam_io import dead_letter
from tf_msemb.pipelines.beam_io import match_files
from tf_msemb.pipelines.beam_io import run_transform
from tf_msemb.pipelines.beam_io import stable_hash
from tf_msemb.text_files import CorpusError

NAMESPACE = "tf_msemb.records"


class PairAligned(beam.DoFn):
    """The lines of one position in every language -> `(pair, (pivot line, other line))` per other language."""

    def __init__(self, files, pivot):
        self.files, self.pivot = files, pivot

    def process(self, element):
        (index, number), lines = element
        texts = dict(lines)
        missing = sorted(set(self.files) - set(texts))
        if missing:
            present = next(lang for lang in self.files if lang in texts)
            raise CorpusError(f"Line counts differ: {self.files[missing[0]][index]} has no line {number} but "
                              f"{self.files[present][index]} has; aligned files must match line by line.")
        for lang, text in texts.items():
            if lang != self.pivot and text is not None and texts[self.pivot] is not None:
                yield f"{self.pivot}-{lang}", (texts[self.pivot], text)


class SplitTsv(beam.DoFn):
    """A TSV line -> `(pair, fields)`; a line with fewer than two fields goes to the dead letters."""

    def __init__(self, files, pair):
        self.files, self.pair = files, pair

    def process(self, element):
        (index, number), (_, text) = element
        if text is None:
            return
        fields = tuple(text.split("\t"))
        if len(fields) < 2:
            yield dead_letter(self.files[index], number, f"{len(fields)} tab-separated field(s), 2 or more needed",
                               text)
            return
        yield self.pair, fields


def _count(key, amount=1):
    """A `((pair, count name), amount)` element for the manifest, and the same Beam counter."""
    Metrics.counter(NAMESPACE, key[1]).inc(amount)
    return key, amount


class CleanRows(beam.DoFn):
    """`(pair, row)` -> the cleaned row, or a `((pair, reason), 1)` count on the `"counts"` output."""

    def __init__(self, max_chars):
        self.max_chars = max_chars

    def process(self, element):
        pair, row = element
        reason, row = clean_row(row, self.max_chars)
        if reason is None:
            yield pair, row
        else:
            yield beam.pvalue.TaggedOutput("counts", _count((pair, reason)))


class WriteShard(beam.DoFn):
    """All rows of one `(pair, shard)` -> that shard's file, sorted, written whole; emits its example count."""

    def __init__(self, output_dir, prefix, num_shards, tokenizer, languages):
        self.output_dir, self.prefix, self.num_shards, self.tokenizer_spec = output_dir, prefix, num_shards, tokenizer
        self.languages = languages

    def setup(self):
        self.tokenizer = load_tokenizer(self.tokenizer_spec)

    def process(self, element):
        (pair, shard), grouped = element
        rows = sorted(grouped["rows"])
        src_lang, tgt_lang = self.languages[pair]
        path = os.path.join(self.output_dir, shard_files(self.prefix, pair, self.num_shards)[shard])

        def write(partial):
            with tf.io.TFRecordWriter(partial) as writer:
                for record in serialize_rows(rows, src_lang, tgt_lang, self.tokenizer):
                    writer.write(record)

        write_atomically(path, write)
        check_shards([path])
        yield _count((pair, "examples"), len(rows))


class WriteRecordsManifest(beam.DoFn):
    """Every `((pair, count name), total)` -> the manifest (`data.writing`'s format plus the malformed count)."""

    def __init__(self, output_dir, prefix, pairs, num_shards, tokenizer):
        self.output_dir, self.prefix, self.pairs = output_dir, prefix, pairs
        self.num_shards, self.tokenizer_spec = num_shards, tokenizer

    def process(self, totals):
        counts = collections.defaultdict(collections.Counter)
        for (pair, name), total in totals:
            counts[pair][name] += total
        manifest = new_manifest(self.prefix, load_tokenizer(self.tokenizer_spec))
        for pair in self.pairs:
            manifest["pairs"][pair] = pair_entry(shard_files(self.prefix, pair, self.num_shards), counts[pair])
        manifest[MALFORMED] = counts["*"][MALFORMED]
        manifest[DEAD_LETTERS] = f"{self.prefix}.{DEAD_LETTERS}.tsv"
        yield write_manifest(manifest, self.output_dir)


def _keyed_by_shard(element, num_shards):
    pair, row = element
    return (pair, stable_hash(pair, *row) % num_shards), row


def _duplicates(element):
    (pair, row), count = element
    yield pair, row
    if count > 1:
        yield beam.pvalue.TaggedOutput("counts", _count((pair, "dropped_duplicate"), count - 1))


class CorpusToRecords(beam.PTransform):
    """Aligned or TSV text files -> TFRecord shards and manifest in `output_dir`; outputs the manifest's path.

    Args:
        files: `{language: [paths]}` of line-aligned files (the i-th path of
            every language aligned), or `{(src_lang, tgt_lang): [paths]}` of
            TSV files with `tsv=True`.
        output_dir, prefix, num_shards, max_chars, tokenizer: as `tools/make_tfrecords.py`'s flags.
        pivot: the language paired with every other one (aligned files; default: the first).
    """

    def __init__(self, files, output_dir, prefix="corpus", num_shards=4, max_chars=1000, tokenizer=None, pivot=None,
                 tsv=False):
        super().__init__()
        if num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {num_shards}.")
        self.files, self.output_dir, self.prefix = files, output_dir, prefix
        self.num_shards, self.max_chars, self.tokenizer, self.tsv = num_shards, max_chars, tokenizer, tsv
        if tsv:
            if len(files) != 1 or not isinstance(next(iter(files)), tuple):
                raise CorpusError("TSV input is one language pair: {(src_lang, tgt_lang): [paths]}.")
            self.languages = {"-".join(pair): pair for pair in files}
        else:
            self.pivot = pivot or next(iter(files))
            _check_aligned(files, self.pivot)
            self.languages = {f"{self.pivot}-{lang}": (self.pivot, lang) for lang in files if lang != self.pivot}
        self.pairs = list(self.languages)

    def expand(self, pipeline):
        tf.io.gfile.makedirs(self.output_dir)
        sources = [(source, index, path) for source, paths in self.files.items() for index, path in enumerate(paths)]
        lines = (pipeline
                 | "Files" >> beam.Create(sources)
                 | "Spread" >> beam.Reshuffle()
                 | "Read" >> beam.ParDo(ReadNumberedLines()).with_outputs(DEAD_LETTERS, main="lines"))
        if self.tsv:
            rows = lines.lines | "Split" >> beam.ParDo(SplitTsv(next(iter(self.files.values())), self.pairs[0])
                                                       ).with_outputs(DEAD_LETTERS, main="rows")
        else:
            rows = (lines.lines
                    | "ByPosition" >> beam.GroupByKey()
                    | "Pair" >> beam.ParDo(PairAligned(self.files, self.pivot)).with_outputs(DEAD_LETTERS,
                                                                                               main="rows"))
        dead = (lines[DEAD_LETTERS], rows[DEAD_LETTERS]) | "DeadLetters" >> beam.Flatten()
        malformed = (dead
                     | "DeadLetterFile" >> WriteDeadLetters(os.path.join(self.output_dir,
                                                                         f"{self.prefix}.{DEAD_LETTERS}.tsv"))
                     | "AsCount" >> beam.Map(lambda n: (("*", MALFORMED), n)))
        cleaned = rows.rows | "Clean" >> beam.ParDo(CleanRows(self.max_chars)).with_outputs("counts", main="rows")
        unique = (cleaned.rows
                  | "CountCopies" >> beam.combiners.Count.PerElement()
                  | "DropDuplicates" >> beam.FlatMap(_duplicates).with_outputs("counts", main="rows"))
        _ = unique.rows | StageDone("clean", "distinct rows kept")
        shards = [((pair, shard), None) for pair in self.pairs for shard in range(self.num_shards)]
        written = ({"rows": unique.rows | "ToShard" >> beam.Map(_keyed_by_shard, self.num_shards),
                    "shard": pipeline | "EveryShard" >> beam.Create(shards)}
                   | "ByShard" >> beam.CoGroupByKey()
                   | "Write" >> beam.ParDo(WriteShard(self.output_dir, self.prefix, self.num_shards, self.tokenizer,
                                                    self.languages)))
        _ = written | StageDone("write", "shards")
        return ((written, cleaned.counts, unique.counts, malformed)
                | "AllCounts" >> beam.Flatten()
                | "Totals" >> beam.CombinePerKey(sum)
                | "Gather" >> beam.combiners.ToList()
                | "Manifest" >> beam.ParDo(WriteRecordsManifest(self.output_dir, self.prefix, self.pairs,
                                                                self.num_shards, self.tokenizer)))


def _check_aligned(files, pivot):
    if pivot not in files:
        raise CorpusError(f"Pivot language {pivot!r} has no input files; given: {sorted(files)}")
    if len(files) < 2:
        raise CorpusError("Aligned input needs at least two languages (--input=LANG:GLOB twice or more).")
    counts = {lang: len(paths) for lang, paths in files.items()}
    if len(set(counts.values())) > 1:
        raise CorpusError(f"Each language needs as many files as the others to align them; got {counts}.")


def _files(inputs, tsv):
    if tsv:
        return {"-": match_files(tsv)}
    files = {}
    for spec in inputs:
        lang, sep, pattern = spec.partition(":")
        if not sep or not lang or not pattern:
            raise CorpusError(f"--input={spec!r} is not LANG:GLOB.")
        files[lang] = match_files(pattern)
    if not files:
        raise CorpusError("Nothing to read: give --input=LANG:GLOB (twice or more) or --tsv=GLOB.")
    return files


def main(argv):
    """Builds and runs the pipeline from the flags; `argv`'s leftovers are Beam's pipeline options."""
    FLAGS = flags.FLAGS
    if FLAGS.tsv and FLAGS.input:
        raise CorpusError("Give either --tsv or --input, not both.")
    if FLAGS.tsv and not (FLAGS.src_lang and FLAGS.tgt_lang):
        raise CorpusError("--tsv needs --src_lang and --tgt_lang.")
    files = _files(FLAGS.input, FLAGS.tsv)
    if FLAGS.tsv:
        files = {(FLAGS.src_lang, FLAGS.tgt_lang): files["-"]}
    run_transform(CorpusToRecords(files, FLAGS.output_dir, FLAGS.prefix, FLAGS.num_shards, FLAGS.max_chars,
                                  FLAGS.tokenizer, FLAGS.pivot, tsv=bool(FLAGS.tsv)), argv[1:])
    print(f"Manifest: {os.path.join(FLAGS.output_dir, FLAGS.prefix)}.manifest.json")


def define_flags():
    """The command line's flags (defined only when it runs: absl flags are process-wide)."""
    flags.DEFINE_multi_string("input", [], "LANG:GLOB of line-aligned text files (plain or .gz); repeat per language.")
    flags.DEFINE_string("pivot", None, "Language paired with every other one (default: the first --input).")
    flags.DEFINE_string("tsv", None, "A glob of src<TAB>tgt[<TAB>hard negatives] files instead of --input.")
    flags.DEFINE_string("src_lang", None, "Source language tag of --tsv.")
    flags.DEFINE_string("tgt_lang", None, "Target language tag of --tsv.")
    flags.DEFINE_string("output_dir", None, "Directory for shards and manifest (local or a runner's file system).")
    flags.DEFINE_string("prefix", "corpus", "File name prefix of the shards and the manifest.")
    flags.DEFINE_integer("num_shards", 4, "Shards per language pair.")
    flags.DEFINE_integer("max_chars", 1000, "Drop pairs with a side longer than this many characters.")
    flags.DEFINE_string("tokenizer", None, "Also store token ids: a SentencePiece .model file or a pretrained model.")
    flags.mark_flag_as_required("output_dir")


if __name__ == "__main__":
    from tf_msemb.pipelines import records  # the importable module: workers unpickle its classes by name

    records.define_flags()
    flags.adopt_module_key_flags(records)  # listed by --help
    cli.run(records.main, beam_arguments=True)
