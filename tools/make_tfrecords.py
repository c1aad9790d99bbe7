"""Writes parallel text as sharded TFRecords (schema: tf_msemb/data/records.py).

Line-aligned files, one per language (Multi30k style); pairs pivot-xx:

    python tools/make_tfrecords.py --input=en:train.en.gz --input=de:train.de.gz \
        --input=fr:train.fr.gz --pivot=en --output_dir=runs/data --prefix=multi30k

One file (or file pair) of src-tgt pairs, with --src_lang and --tgt_lang: a TSV of
`src<TAB>tgt[<TAB>hard negative...]` lines, an OPUS TMX file, or OPUS's Moses format
(the `.zip`, or the name `<name>` of `<name>.de` and `<name>.en`):

    python tools/make_tfrecords.py --tsv=pairs.tsv --src_lang=en --tgt_lang=de \
        --output_dir=runs/data --prefix=mypairs
    python tools/make_tfrecords.py --tmx=de-en.tmx.gz --src_lang=de --tgt_lang=en ...
    python tools/make_tfrecords.py --moses=de-en.txt.zip --src_lang=de --tgt_lang=en ...

A corpus directory of `<xx>-en/{xx,en,origin}.txt.gz` (`../shared/data/parallel/*`),
whole origins held out for dev:

    python tools/make_tfrecords.py --parallel_dir=../shared/data/parallel/wmt_newstest \
        --held_out=newstest2014 --output_dir=runs/parallel/news --prefix=news

Whitespace runs become one space; empty and over-long pairs are dropped and
counted, and so are exact duplicate pairs with `--drop_duplicates` (the
Beam pipeline `tf_msemb.pipelines.records` always drops them); the manifest
`<output_dir>/<prefix>.manifest.json` is what training configs point at.
`--tokenizer=runs/spm/m.model` (or a pretrained model such as
`all-MiniLM-L6-v2`) also stores every pair's token ids, so training with
`make_dataset.pretokenized = True` skips tokenization.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.text_files import CorpusError
from tf_msemb.data.readers import aligned_pairs
from tf_msemb.data.readers import language_inputs
from tf_msemb.data.readers import moses_pairs
from tf_msemb.data.readers import parallel_directory_pairs
from tf_msemb.data.readers import tmx_pairs
from tf_msemb.data.readers import tsv_pairs
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.models.pretrained import load_tokenizer

flags.DEFINE_multi_string("input", [], "LANG:PATH of a line-aligned text file (plain or .gz); repeat per language.")
flags.DEFINE_string("pivot", None, "Language paired with every other one (default: the first --input).")
flags.DEFINE_string("tsv", None, "A TSV file of src<TAB>tgt[<TAB>hard negatives] lines instead of --input.")
flags.DEFINE_string("tmx", None, "A TMX file (OPUS's .tmx, plain or .gz) instead of --input.")
flags.DEFINE_string("moses", None, "OPUS's Moses format instead of --input: the .zip, or NAME of NAME.src and "
                    "NAME.tgt (plain or .gz).")
flags.DEFINE_string("src_lang", None, "Source language tag of --tsv, --tmx or --moses.")
flags.DEFINE_string("tgt_lang", None, "Target language tag of --tsv, --tmx or --moses.")
flags.DEFINE_string("parallel_dir", None, "A corpus directory of <xx>-en/{xx,en,origin}.txt(.gz) instead of --input "
                    "(../shared/data/parallel/<corpus>).")
flags.DEFINE_list("languages", None, "With --parallel_dir: the xx of the pairs to write (default: all).")
flags.DEFINE_list("held_out", [], "With --parallel_dir: origins (origin.tsv's first column, e.g. newstest2014) "
                  "left out, kept for dev; recorded in the manifest.")
flags.DEFINE_string("output_dir", None, "Directory for shards and manifest.")
flags.DEFINE_string("prefix", "corpus", "File name prefix of the shards and the manifest.")
flags.DEFINE_integer("num_shards", 4, "Shards per language pair.")
flags.DEFINE_integer("max_chars", 1000, "Drop pairs with a side longer than this many characters.")
flags.DEFINE_bool("drop_duplicates", False, "Drop a pair equal to an earlier one of its language pair.")
flags.DEFINE_string("tokenizer", None, "Also store token ids: a SentencePiece .model file or a pretrained model "
                    "name/directory (its tokenizer). Train with make_dataset.pretokenized = True.")
flags.mark_flag_as_required("output_dir")
FLAGS = flags.FLAGS


def _sources():
    one_file = {"tsv": (FLAGS.tsv, tsv_pairs), "tmx": (FLAGS.tmx, tmx_pairs), "moses": (FLAGS.moses, moses_pairs)}
    given = [f"--{name}" for name, (path, _) in one_file.items() if path]
    given += ["--input"] * bool(FLAGS.input) + ["--parallel_dir"] * bool(FLAGS.parallel_dir)
    if len(given) > 1:
        raise CorpusError(f"Give one of --input, --tsv, --tmx, --moses and --parallel_dir, not {' and '.join(given)}.")
    if (FLAGS.languages or FLAGS.held_out) and not FLAGS.parallel_dir:
        raise CorpusError("--languages and --held_out go with --parallel_dir.")
    if FLAGS.parallel_dir:
        return parallel_directory_pairs(FLAGS.parallel_dir, FLAGS.languages, FLAGS.held_out)
    for name, (path, reader) in one_file.items():
        if path:
            if not (FLAGS.src_lang and FLAGS.tgt_lang):
                raise CorpusError(f"--{name} needs --src_lang and --tgt_lang.")
            return reader(path, FLAGS.src_lang, FLAGS.tgt_lang)
    files = language_inputs(FLAGS.input)
    if not files:
        raise CorpusError("Nothing to read: give --input=LANG:PATH (twice or more), --tsv, --tmx, --moses or "
                          "--parallel_dir.")
    return aligned_pairs(files, FLAGS.pivot or next(iter(files)))


def main(argv):
    del argv
    held_out = {"held_out": sorted(FLAGS.held_out)} if FLAGS.held_out else None
    write_tfrecords(_sources(), FLAGS.output_dir, FLAGS.prefix, FLAGS.num_shards, FLAGS.max_chars,
                    tokenizer=load_tokenizer(FLAGS.tokenizer), drop_duplicates=FLAGS.drop_duplicates,
                    manifest_fields=held_out)


if __name__ == "__main__":
    cli.run(main)
