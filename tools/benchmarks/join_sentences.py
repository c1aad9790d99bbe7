"""Larger parallel corpora from a small one: every output line joins two aligned lines, both sides alike.

    python tools/benchmarks/join_sentences.py --input=en:../shared/data/multi30k/train.en.gz \
        --input=de:../shared/data/multi30k/train.de.gz --size=100000 --output_dir=runs/joined100k

Multi30k has 29,000 pairs; the scale checks of the Beam pipelines need
100,000 distinct sentences a side. Line i of every output joins input lines
`a_i` and `b_i` (distinct pairs `a_i != b_i`, a fixed draw), so the outputs
stay translations of each other line by line: `<lang>.aligned.txt`. For
mining, `<lang>.shuffled.txt` holds the same lines in an order of its own
per language.
"""

import os

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.text_files import read_lines

flags.DEFINE_multi_string("input", [], "LANG:PATH of a line-aligned file; repeat per language.")
flags.DEFINE_integer("size", 100_000, "Lines per output.")
flags.DEFINE_string("output_dir", None, "Where the joined files go.")
flags.DEFINE_integer("seed", 0, "Seed of the draw of line pairs and of the shuffles.")
flags.mark_flag_as_required("output_dir")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    import numpy as np

    files = dict(spec.split(":", 1) for spec in FLAGS.input)
    lines = {lang: read_lines(path) for lang, path in files.items()}
    n = min(len(v) for v in lines.values())
    rng = np.random.default_rng(FLAGS.seed)
    pairs, seen = [], set()
    while len(pairs) < FLAGS.size:
        a, b = (int(v) for v in rng.integers(0, n, 2))
        if a != b and (a, b) not in seen:
            seen.add((a, b))
            pairs.append((a, b))
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    for lang, text in lines.items():
        joined = [f"{text[a].strip()} {text[b].strip()}" for a, b in pairs]
        with open(os.path.join(FLAGS.output_dir, f"{lang}.aligned.txt"), "w", encoding="utf-8") as f:
            f.write("".join(f"{line}\n" for line in joined))
        order = rng.permutation(len(joined))
        with open(os.path.join(FLAGS.output_dir, f"{lang}.shuffled.txt"), "w", encoding="utf-8") as f:
            f.write("".join(f"{joined[i]}\n" for i in order))
    print(f"{len(pairs)} joined lines per language in {FLAGS.output_dir}")


if __name__ == "__main__":
    cli.run(main)
