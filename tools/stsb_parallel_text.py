"""Writes the STS-b train split of stsb_multi_mt as line-aligned parallel text, one file per language.

    python tools/stsb_parallel_text.py --stsb_dir=../shared/data/stsb_multi_mt --output_dir=runs/stsb_text
    python tools/make_tfrecords.py $(for l in en de es fr it ja nl pl pt ru zh; do
        echo --input=$l:runs/stsb_text/stsb.train.$l.txt; done) --pivot=en \
        --output_dir=runs/stsb/records --prefix=stsb --drop_duplicates

stsb_multi_mt's files are the English STS benchmark machine-translated, row
by row, so sentence 1 and sentence 2 of row i in every language are
translations of each other: parallel text in eleven languages (issue 39,
point 4). Each distinct English sentence becomes one line of
`stsb.<split>.<lang>.txt` (its first translation kept), so the files stay
line-aligned. English sentences that also occur in `--exclude_split` (dev)
are left out, so a model trained on the lines is not scored on sentences it
has seen in the dev table's STS sets.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import os

from absl import flags

from tf_msemb.data.labeled_pairs import read_stsb_csv
from tf_msemb.text_files import CorpusError

LANGUAGES = ("en", "de", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh")

flags.DEFINE_string("stsb_dir", "../shared/data/stsb_multi_mt", "Folder of stsb-<lang>-<split>.csv files.")
flags.DEFINE_list("languages", list(LANGUAGES), "Languages to write; en, the pivot, is always among them.")
flags.DEFINE_string("split", "train", "The split to write.")
flags.DEFINE_string("exclude_split", "dev", "English sentences of this split are left out ('' keeps all).")
flags.DEFINE_string("output_dir", None, "Where stsb.<split>.<lang>.txt go.")
flags.mark_flag_as_required("output_dir")
FLAGS = flags.FLAGS


def parallel_lines(stsb_dir, languages, split, exclude_split):
    """`({lang: lines}, excluded)`: each distinct English sentence of `split` once, with its translations."""
    languages = ["en"] + [lang for lang in languages if lang != "en"]
    rows = {lang: read_stsb_csv(os.path.join(stsb_dir, f"stsb-{lang}-{split}.csv")) for lang in languages}
    sizes = {lang: len(first) for lang, (first, _, _) in rows.items()}
    if len(set(sizes.values())) > 1:
        raise CorpusError(f"stsb-<lang>-{split}.csv in {stsb_dir} differ in rows: {sizes}.")
    held_out = set()
    if exclude_split:
        first, second, _ = read_stsb_csv(os.path.join(stsb_dir, f"stsb-en-{exclude_split}.csv"))
        held_out = set(first) | set(second)
    lines, seen, excluded = {lang: [] for lang in languages}, set(), 0
    for column in (0, 1):
        for i, english in enumerate(rows["en"][column]):
            if english in seen or not english.strip():
                continue
            seen.add(english)
            translations = {lang: rows[lang][column][i].replace("\n", " ").strip() for lang in languages}
            if english in held_out:
                excluded += 1
            elif all(translations.values()):
                for lang, text in translations.items():
                    lines[lang].append(text)
    return lines, excluded


def main(argv):
    del argv
    lines, excluded = parallel_lines(FLAGS.stsb_dir, FLAGS.languages, FLAGS.split, FLAGS.exclude_split)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    for lang, texts in lines.items():
        with open(os.path.join(FLAGS.output_dir, f"stsb.{FLAGS.split}.{lang}.txt"), "w", encoding="utf-8") as f:
            f.write("".join(f"{text}\n" for text in texts))
    left_out = (f"{excluded} English sentences of the {FLAGS.exclude_split} split left out" if FLAGS.exclude_split
                else "no split left out")
    print(f"{len(lines['en'])} aligned lines in {len(lines)} languages written to {FLAGS.output_dir} ({left_out})")


if __name__ == "__main__":
    cli.run(main)
