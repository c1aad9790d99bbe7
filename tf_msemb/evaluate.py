"""Evaluates an exported model: `python -m tf_msemb.evaluate --model=PATH --task=retrieval ...`.

`--model` is an export directory or a training `model_dir`.

retrieval: Tatoeba-style accuracy for each `--pair=SRC_FILE,TGT_FILE`
(line-aligned text, plain or .gz), printed as a table; `--output` writes JSON.
"""

import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

from tf_msemb.data.text_files import CorpusError
from tf_msemb.data.text_files import read_lines
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.retrieval import translation_accuracy

flags.DEFINE_string("model", None, "Export directory or training model_dir.")
flags.DEFINE_enum("task", "retrieval", ["retrieval"], "What to evaluate.")
flags.DEFINE_multi_string("pair", [], "SRC_FILE,TGT_FILE of line-aligned sentences (retrieval).")
flags.DEFINE_integer("batch_size", 64, "Sentences per encoding batch.")
flags.DEFINE_string("output", None, "Write the results as JSON here.")
flags.mark_flag_as_required("model")
FLAGS = flags.FLAGS


def evaluate_retrieval(model, pairs, batch_size=64, verbose=True):
    """Returns `{"src_name / tgt_name": accuracies and size}` for each pair spec."""
    results = {}
    for spec in pairs:
        src_path, sep, tgt_path = spec.partition(",")
        if not sep:
            raise CorpusError(f"--pair={spec!r} is not SRC_FILE,TGT_FILE.")
        src, tgt = read_lines(src_path), read_lines(tgt_path)
        if len(src) != len(tgt):
            raise CorpusError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}.")
        src_embeddings = encode(model, src, batch_size, verbose)
        tgt_embeddings = encode(model, tgt, batch_size, verbose)
        name = f"{os.path.basename(src_path)} / {os.path.basename(tgt_path)}"
        results[name] = translation_accuracy(src_embeddings, tgt_embeddings) | {"size": len(src)}
    return results


def format_table(results):
    lines = [f"{'pair':<40} {'size':>6} {'src->tgt':>9} {'tgt->src':>9} {'mean':>7}"]
    for name, r in results.items():
        lines.append(
            f"{name[-40:]:<40} {r['size']:>6} {100 * r['src->tgt']:>9.2f} "
            f"{100 * r['tgt->src']:>9.2f} {100 * r['mean']:>7.2f}"
        )
    return "\n".join(lines)


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    if not FLAGS.pair:
        sys.exit("error: retrieval needs at least one --pair=SRC_FILE,TGT_FILE")
    try:
        model = load_model(FLAGS.model)
        results = evaluate_retrieval(model, FLAGS.pair, FLAGS.batch_size)
    except (CorpusError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    print(format_table(results))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    app.run(main)
