"""Evaluates an exported model: `python -m tf_msemb.evaluate --model=PATH --task=retrieval ...`.

`--model` is an export directory or a training `model_dir`.

retrieval: Tatoeba-style accuracy for each `--pair=SRC_FILE,TGT_FILE`
(line-aligned text, plain or .gz).

sts: Spearman and Pearson x100 of cosine vs gold, for each `--sts_tsv=FILE`
(STS benchmark format) and each `--stsb_pair=L1-L2` of the multilingual STS-b
CSVs in `--stsb_dir` (`stsb-<lang>-<split>.csv`; `en-de` pairs English
sentence 1 with German sentence 2). `--joined` adds all sets scored as one
pool and the language-bias difference (seed 001, Table 8).

mining: BUCC-style bitext mining. `--mining_train=SRC,TGT,GOLD` and
`--mining_test=SRC,TGT,GOLD` name `id<TAB>sentence` files and an
`id1<TAB>id2` gold file; the score threshold that maximizes F1 on train is
applied to test. `--margin` (ratio, distance, absolute, rescore,
rescore_one_sided), `--selection` (forward, backward, intersect, max), `--knn`.

Results are printed as a table; `--output` writes them as JSON.
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
from tf_msemb.evaluation import mining
from tf_msemb.evaluation.retrieval import translation_accuracy
from tf_msemb.evaluation.sts import cross_lingual
from tf_msemb.data.labeled_pairs import read_stsb_csv
from tf_msemb.data.labeled_pairs import read_stsb_tsv
from tf_msemb.evaluation.sts import correlations
from tf_msemb.evaluation.sts import language_bias
from tf_msemb.evaluation.sts import row_cosines

flags.DEFINE_string("model", None, "Export directory or training model_dir.")
flags.DEFINE_enum("task", "retrieval", ["retrieval", "sts", "mining"], "What to evaluate.")
flags.DEFINE_multi_string("pair", [], "SRC_FILE,TGT_FILE of line-aligned sentences (retrieval).")
flags.DEFINE_multi_string("sts_tsv", [], "An STS benchmark TSV file (sts).")
flags.DEFINE_string("stsb_dir", None, "Directory of multilingual STS-b CSVs (sts).")
flags.DEFINE_multi_string("stsb_pair", [], "Language pair of --stsb_dir, e.g. en-de or de-de (sts).")
flags.DEFINE_string("split", "dev", "Split of the multilingual STS-b files (sts).")
flags.DEFINE_bool("joined", False, "Also score all STS sets as one pool and report the language bias (sts).")
flags.DEFINE_string("mining_train", None, "SRC,TGT,GOLD files whose best-F1 threshold is chosen (mining).")
flags.DEFINE_string("mining_test", None, "SRC,TGT,GOLD files scored with that threshold (mining).")
flags.DEFINE_enum("margin", "ratio", list(mining.MARGINS), "Margin score (mining).")
flags.DEFINE_enum("selection", "intersect", list(mining.SELECTIONS), "Candidate selection (mining).")
flags.DEFINE_integer("knn", 4, "Neighbours per direction (mining).")
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


def sts_sets(tsv_files=(), stsb_dir=None, stsb_pairs=(), split="dev"):
    """`{name: (sentences1, sentences2, gold)}` for the requested STS sets."""
    sets = {os.path.basename(path): read_stsb_tsv(path) for path in tsv_files}
    for pair in stsb_pairs:
        languages = pair.split("-")
        if len(languages) != 2 or stsb_dir is None:
            raise CorpusError(f"--stsb_pair={pair!r} needs the form L1-L2 and --stsb_dir.")
        first, second = (read_stsb_csv(os.path.join(stsb_dir, f"stsb-{lang}-{split}.csv")) for lang in languages)
        sets[f"stsb {split} {pair}"] = cross_lingual(first, second)
    return sets


def evaluate_sts(model, sets, batch_size=64, verbose=True, joined=False):
    """Returns `{name: {"spearman", "pearson", "size"}}` for each STS set.

    With `joined`, two more rows: all sets scored as one pool, and the
    language-bias difference (joined minus the mean of the separate sets).
    """
    results, scored = {}, []
    for name, (first, second, gold) in sets.items():
        cosine = row_cosines(encode(model, first, batch_size, verbose), encode(model, second, batch_size, verbose))
        results[name] = correlations(cosine, gold)
        scored.append((cosine, gold))
    if joined:
        results["joined"], results["language bias"] = language_bias(scored)
    return results


def mine_split(model, spec, k=4, margin="ratio", selection="intersect", batch_size=64, verbose=True):
    """Candidates `(score, src_id, tgt_id)` and the gold set of one `SRC,TGT,GOLD` split."""
    paths = spec.split(",")
    if len(paths) != 3:
        raise CorpusError(f"{spec!r} is not SRC,TGT,GOLD.")
    src_ids, src = mining.read_id_sentences(paths[0])
    tgt_ids, tgt = mining.read_id_sentences(paths[1])
    forward, backward = mining.margin_candidates(
        encode(model, src, batch_size, verbose), encode(model, tgt, batch_size, verbose), k, margin
    )
    chosen = mining.select(forward, backward, selection)
    return [(s, src_ids[i], tgt_ids[j]) for s, i, j in chosen], mining.read_gold(paths[2])


def evaluate_mining(model, train_spec, test_spec, k=4, margin="ratio", selection="intersect", batch_size=64,
                    verbose=True):
    """P/R/F1 on train at its best threshold, and on test at that same threshold."""
    candidates, gold = mine_split(model, train_spec, k, margin, selection, batch_size, verbose)
    threshold, train_metrics = mining.best_threshold(candidates, gold)
    results = {"train": train_metrics | {"threshold": threshold, "size": len(gold)}}
    if test_spec:
        candidates, gold = mine_split(model, test_spec, k, margin, selection, batch_size, verbose)
        kept = [(i, j) for s, i, j in candidates if s >= threshold]
        results["test"] = mining.precision_recall_f1(kept, gold) | {"threshold": threshold, "size": len(gold)}
    return results


def format_table(results, scale=1.0):
    """One row per evaluated set, a column per metric (values times `scale`, thresholds as they are)."""
    columns = [c for c in next(iter(results.values())) if c != "size"]
    lines = [f"{'set':<40} {'size':>6} " + " ".join(f"{c:>9}" for c in columns)]
    for name, r in results.items():
        values = " ".join(f"{r[c] if c == 'threshold' else scale * r[c]:>9.2f}" for c in columns)
        lines.append(f"{name[-40:]:<40} {r['size']:>6} {values}")
    return "\n".join(lines)


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    try:
        if FLAGS.task == "retrieval":
            if not FLAGS.pair:
                raise CorpusError("retrieval needs at least one --pair=SRC_FILE,TGT_FILE")
            results = evaluate_retrieval(load_model(FLAGS.model), FLAGS.pair, FLAGS.batch_size)
        elif FLAGS.task == "mining":
            if not FLAGS.mining_train:
                raise CorpusError("mining needs --mining_train=SRC,TGT,GOLD (and usually --mining_test)")
            results = evaluate_mining(load_model(FLAGS.model), FLAGS.mining_train, FLAGS.mining_test, FLAGS.knn,
                                      FLAGS.margin, FLAGS.selection, FLAGS.batch_size)
        else:
            sets = sts_sets(FLAGS.sts_tsv, FLAGS.stsb_dir, FLAGS.stsb_pair, FLAGS.split)
            if not sets:
                raise CorpusError("sts needs --sts_tsv=FILE or --stsb_dir=DIR with --stsb_pair=L1-L2")
            results = evaluate_sts(load_model(FLAGS.model), sets, FLAGS.batch_size, joined=FLAGS.joined)
    except (CorpusError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    # Accuracies and P/R/F1 are fractions; correlations are already x100.
    print(format_table(results, scale=1.0 if FLAGS.task == "sts" else 100.0))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    app.run(main)
