"""Writes parallel text as sharded TFRecords (schema: tf_msemb/data/records.py).

Line-aligned files, one per language (Multi30k style); pairs pivot-xx:

    python tools/make_tfrecords.py --input=en:train.en.gz --input=de:train.de.gz \
        --input=fr:train.fr.gz --pivot=en --output_dir=runs/data --prefix=multi30k

A TSV of `src<TAB>tgt[<TAB>hard negative...]` lines:

    python tools/make_tfrecords.py --tsv=pairs.tsv --src_lang=en --tgt_lang=de \
        --output_dir=runs/data --prefix=mypairs

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
from tf_msemb.data.writing import aligned_pairs
from tf_msemb.data.writing import tsv_pairs
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.models.pretrained import load_tokenizer

flags.DEFINE_multi_string("input", [], "LANG:PATH of a line-aligned text file (plain or .gz); repeat per language.")
flags.DEFINE_string("pivot", None, "Language paired with every other one (default: the first --input).")
flags.DEFINE_string("tsv", None, "A TSV file of src<TAB>tgt[<TAB>hard negatives] lines instead of --input.")
flags.DEFINE_string("src_lang", None, "Source language tag of --tsv.")
flags.DEFINE_string("tgt_lang", None, "Target language tag of --tsv.")
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
    if FLAGS.tsv:
        if FLAGS.input:
            raise CorpusError("Give either --tsv or --input, not both.")
        if not (FLAGS.src_lang and FLAGS.tgt_lang):
            raise CorpusError("--tsv needs --src_lang and --tgt_lang.")
        return tsv_pairs(FLAGS.tsv, FLAGS.src_lang, FLAGS.tgt_lang)
    files = {}
    for spec in FLAGS.input:
        lang, sep, path = spec.partition(":")
        if not sep or not lang or not path:
            raise CorpusError(f"--input={spec!r} is not LANG:PATH.")
        files[lang] = path
    if not files:
        raise CorpusError("Nothing to read: give --input=LANG:PATH (twice or more) or --tsv.")
    return aligned_pairs(files, FLAGS.pivot or next(iter(files)))


def main(argv):
    del argv
    write_tfrecords(_sources(), FLAGS.output_dir, FLAGS.prefix, FLAGS.num_shards, FLAGS.max_chars,
                    tokenizer=load_tokenizer(FLAGS.tokenizer), drop_duplicates=FLAGS.drop_duplicates)


if __name__ == "__main__":
    cli.run(main)
