"""Text corpora to sharded TFRecords plus manifest, as a Beam pipeline (what `tools/make_tfrecords.py` does on one machine).

    python -m tf_msemb.pipelines.records --input='en:corpus/*.en.gz' --input='de:corpus/*.de.gz' \
        --output_dir=runs/data --prefix=web [--runner=DataflowRunner ...]
    python -m tf_msemb.pipelines.records --tmx='opus/*.de-en.tmx.gz' --src_lang=de --tgt_lang=en ...
    python -m tf_msemb.pipelines.records --moses='opus/*.de-en.zip' --src_lang=de --tgt_lang=en ...

Line-aligned files (one glob per language; the i-th file of each glob are
aligned line by line) pair the pivot language with every other; or one
language pair comes as TSV files of `src<TAB>tgt[<TAB>hard negative ...]`
rows, TMX files (OPUS's `.tmx`, one `<tu>` a row) or OPUS's Moses format
(its `.zip` files, or the aligned `NAME.<src>` / `NAME.<tgt>` files), read
as `tools/make_tfrecords.py` reads them (`data.readers`). Rows are cleaned and
length-filtered by `data.writing.clean_row`, exact duplicate rows of a
language pair are dropped, and the rest are serialized by
`data.writing.serialize_rows` into `<prefix>.<pair>.tfrecord-0000i-of-0000n`
shards, the names and schema `make_dataset` reads. A row's shard is a hash of
its content and each shard is written whole, sorted, under a temporary name,
so a retried or rerun stage rewrites the same files. Each shard passes
`check_shards` once written. Drops are Beam counters and manifest fields
(`dropped_empty`, `dropped_long`, `dropped_duplicate`, and the corpus'
`malformed` lines and `<tu>`s, which go to `<prefix>.dead_letters.tsv` as
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

from tf_msemb.data.readers import language_inputs
from tf_msemb.data.readers import moses_zip_rows
from tf_msemb.data.readers import translation_units
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
from tf_msemb.pipelines.beam_io import READ_ERRORS
from tf_msemb.pipelines.beam_io import ReadNumberedLines
from tf_msemb.pipelines.beam_io import StageDone
from tf_msemb.pipelines.beam_io import WriteDeadLetters
from tf_msemb.pipelines.beam_io import dead_letter
from tf_msemb.pipelines.beam_io import match_files
from tf_msemb.pipelines.beam_io import opened
from tf_msemb.pipelines.beam_io import read_error
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


class ReadPairFile(beam.DoFn):
    """One file of a language pair, read whole by `read(stream, path)` -> `(pair, row)` elements (and dead
    letters). A file that cannot be read stops the pipeline with a `CorpusError` naming it."""

    def __init__(self, pair, languages):
        self.pair, self.languages = pair, languages

    def process(self, element):
        _, _, path = element
        try:
            with opened(path) as stream:
                yield from self.read(stream, path)
        except READ_ERRORS as e:
            raise CorpusError(f"Cannot read {path}: {read_error(e)}") from None


class ReadTranslationUnits(ReadPairFile):
    """A TMX file: a row per `<tu>`; a `<tu>` without one of the languages goes to the dead letters, and a file
    that is not well-formed or holds no `<tu>` stops the pipeline, naming it."""

    def read(self, stream, path):
        units = 0
        for units, unit in enumerate(translation_units(stream, path, *self.languages), start=1):
            missing = unit.missing_side(self.languages)
            yield dead_letter(path, unit.line, missing, unit.sides) if missing else (self.pair, unit.sides)
        if not units:
            raise CorpusError(f"{path}: no <tu> translation units.")


class ReadMosesZip(ReadPairFile):
    """OPUS's Moses `.zip`: a row per aligned line (`data.readers.moses_zip_rows`)."""

    def read(self, stream, path):
        for row in moses_zip_rows(stream, path, *self.languages):
            yield self.pair, row


# The one-pair layouts whose files are read whole, each by its DoFn.
FILE_READERS = {"tmx": ReadTranslationUnits, "moses": ReadMosesZip}
LAYOUTS = ("aligned", "tsv", *FILE_READERS)


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
    """Parallel text files -> TFRecord shards and manifest in `output_dir`; outputs the manifest's path.

    Args:
        files: `{language: [paths]}` of line-aligned files (the i-th path of
            every language aligned), or, for the one-pair layouts,
            `{(src_lang, tgt_lang): [paths]}`.
        output_dir, prefix, num_shards, max_chars, tokenizer: as `tools/make_tfrecords.py`'s flags.
        pivot: the language paired with every other one (aligned files; default: the first).
        layout: "aligned", or one language pair's "tsv", "tmx" or "moses" (`.zip`) files.
    """

    def __init__(self, files, output_dir, prefix="corpus", num_shards=4, max_chars=1000, tokenizer=None, pivot=None,
                 layout="aligned"):
        super().__init__()
        if num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {num_shards}.")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}.")
        self.files, self.output_dir, self.prefix = files, output_dir, prefix
        self.num_shards, self.max_chars, self.tokenizer, self.layout = num_shards, max_chars, tokenizer, layout
        if layout != "aligned":
            if len(files) != 1 or not isinstance(next(iter(files)), tuple):
                raise CorpusError(f"{layout} input is one language pair: {{(src_lang, tgt_lang): [paths]}}.")
            self.languages = {"-".join(pair): pair for pair in files}
        else:
            self.pivot = pivot or next(iter(files))
            _check_aligned(files, self.pivot)
            self.languages = {f"{self.pivot}-{lang}": (self.pivot, lang) for lang in files if lang != self.pivot}
        self.pairs = list(self.languages)

    def _rows(self, pipeline):
        """`(pair, row)` elements and the dead letters of reading them."""
        sources = [(source, index, path) for source, paths in self.files.items() for index, path in enumerate(paths)]
        files = pipeline | "Files" >> beam.Create(sources) | "Spread" >> beam.Reshuffle()
        if self.layout in FILE_READERS:
            reader = FILE_READERS[self.layout](self.pairs[0], self.languages[self.pairs[0]])
            rows = files | "Read" >> beam.ParDo(reader).with_outputs(DEAD_LETTERS, main="rows")
            return rows.rows, [rows[DEAD_LETTERS]]
        lines = files | "Read" >> beam.ParDo(ReadNumberedLines()).with_outputs(DEAD_LETTERS, main="lines")
        if self.layout == "tsv":
            rows = lines.lines | "Split" >> beam.ParDo(SplitTsv(next(iter(self.files.values())), self.pairs[0])
                                                       ).with_outputs(DEAD_LETTERS, main="rows")
        else:
            rows = (lines.lines
                    | "ByPosition" >> beam.GroupByKey()
                    | "Pair" >> beam.ParDo(PairAligned(self.files, self.pivot)).with_outputs(DEAD_LETTERS,
                                                                                               main="rows"))
        return rows.rows, [lines[DEAD_LETTERS], rows[DEAD_LETTERS]]

    def expand(self, pipeline):
        tf.io.gfile.makedirs(self.output_dir)
        rows, letters = self._rows(pipeline)
        dead = letters | "DeadLetters" >> beam.Flatten()
        malformed = (dead
                     | "DeadLetterFile" >> WriteDeadLetters(os.path.join(self.output_dir,
                                                                         f"{self.prefix}.{DEAD_LETTERS}.tsv"))
                     | "AsCount" >> beam.Map(lambda n: (("*", MALFORMED), n)))
        cleaned = rows | "Clean" >> beam.ParDo(CleanRows(self.max_chars)).with_outputs("counts", main="rows")
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


def _moses(pattern, src_lang, tgt_lang):
    """`--moses`'s files: a glob of `.zip` files, or of the NAMEs of aligned `NAME.<src>` / `NAME.<tgt>` files
    (plain or .gz), as `(files, layout, pivot)`."""
    if pattern.endswith(".zip"):
        return {(src_lang, tgt_lang): match_files(pattern)}, "moses", None
    sides = {}
    for lang in (src_lang, tgt_lang):
        try:
            sides[lang] = match_files(f"{pattern}.{lang}")
        except CorpusError:
            sides[lang] = match_files(f"{pattern}.{lang}.gz")
    return sides, "aligned", src_lang


def _inputs(FLAGS):
    """The flags' files as `(files, layout, pivot)` for `CorpusToRecords`."""
    one_pair = {"tsv": FLAGS.tsv, "tmx": FLAGS.tmx, "moses": FLAGS.moses}
    given = [f"--{name}" for name, pattern in one_pair.items() if pattern] + ["--input"] * bool(FLAGS.input)
    if len(given) > 1:
        raise CorpusError(f"Give one of --input, --tsv, --tmx and --moses, not {' and '.join(given)}.")
    for layout, pattern in one_pair.items():
        if pattern:
            if not (FLAGS.src_lang and FLAGS.tgt_lang):
                raise CorpusError(f"--{layout} needs --src_lang and --tgt_lang.")
            if layout == "moses":
                return _moses(pattern, FLAGS.src_lang, FLAGS.tgt_lang)
            return {(FLAGS.src_lang, FLAGS.tgt_lang): match_files(pattern)}, layout, None
    files = {lang: match_files(pattern) for lang, pattern in language_inputs(FLAGS.input).items()}
    if not files:
        raise CorpusError("Nothing to read: give --input=LANG:GLOB (twice or more), --tsv, --tmx or --moses.")
    return files, "aligned", FLAGS.pivot


def main(argv):
    """Builds and runs the pipeline from the flags; `argv`'s leftovers are Beam's pipeline options."""
    FLAGS = flags.FLAGS
    files, layout, pivot = _inputs(FLAGS)
    run_transform(CorpusToRecords(files, FLAGS.output_dir, FLAGS.prefix, FLAGS.num_shards, FLAGS.max_chars,
                                  FLAGS.tokenizer, pivot, layout=layout), argv[1:])
    print(f"Manifest: {os.path.join(FLAGS.output_dir, FLAGS.prefix)}.manifest.json")


def define_flags():
    """The command line's flags (defined only when it runs: absl flags are process-wide)."""
    flags.DEFINE_multi_string("input", [], "LANG:GLOB of line-aligned text files (plain or .gz); repeat per language.")
    flags.DEFINE_string("pivot", None, "Language paired with every other one (default: the first --input).")
    flags.DEFINE_string("tsv", None, "A glob of src<TAB>tgt[<TAB>hard negatives] files instead of --input.")
    flags.DEFINE_string("tmx", None, "A glob of TMX files (OPUS's .tmx, plain or .gz) instead of --input.")
    flags.DEFINE_string("moses", None, "OPUS's Moses format instead of --input: a glob of its .zip files, or of "
                        "the NAMEs of NAME.src and NAME.tgt aligned files (plain or .gz).")
    flags.DEFINE_string("src_lang", None, "Source language tag of --tsv, --tmx or --moses.")
    flags.DEFINE_string("tgt_lang", None, "Target language tag of --tsv, --tmx or --moses.")
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
