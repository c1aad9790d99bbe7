"""Evaluates an exported model: `python -m tf_msemb.evaluate --model=PATH --task=retrieval ...`.

`--model` is an export directory or a training `model_dir`.

retrieval: Tatoeba-style accuracy for each `--pair=SRC_FILE,TGT_FILE`
(line-aligned text, plain or .gz); P@1/3/10 of each `--pool_pair=SRC,TGT`
(line i of SRC is the translation of line i of TGT) with every target
sentence, plus the lines of any `--pool_distractors=FILE`, as the pool,
searched with `--index` (exact, flat, ivf, ivfpq, hnsw); and P@1/3/10 of each
`--doc_pair=SRC,TGT` of `doc_id<TAB>sentence` files, documents embedded as
the mean of their sentence embeddings and matched by id.

sts: Spearman and Pearson x100 of cosine vs gold, for each `--sts_tsv=FILE`
(STS benchmark format) and each `--stsb_pair=L1-L2` of the multilingual STS-b
CSVs in `--stsb_dir` (`stsb-<lang>-<split>.csv`; `en-de` pairs English
sentence 1 with German sentence 2), and each track of SemEval STS files
(`STS.input.<track>.txt` with `STS.gs.<track>.txt`) in `--semeval_dir`. `--joined` adds all sets scored as one
pool and the language-bias difference (seed 001, Table 8).

mining: BUCC-style bitext mining. `--src_train`, `--tgt_train` and
`--gold_train` name the train split (`id<TAB>sentence` files and an
`id1<TAB>id2` gold file), `--src`, `--tgt`, `--gold` the test split; the
score threshold that maximizes F1 on train is applied to test. `--margin` (ratio, distance, absolute, rescore,
rescore_one_sided), `--selection` (forward, backward, intersect, max), `--knn`.

classify: zero-shot cross-lingual transfer. An MLP trained on the frozen
embeddings of `--classify_train=FILE` (`label<TAB>text`, language A) is
tested on each `--classify_test=FILE` (language B); mean and std over `--seeds`.

Results are printed as a table; `--output` writes them as JSON.
"""

import json
import os

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import numpy as np
from absl import flags

from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation import mining
from tf_msemb.evaluation import search
from tf_msemb.evaluation.classification import read_labeled_texts
from tf_msemb.evaluation.classification import zero_shot_transfer
from tf_msemb.evaluation.retrieval import document_embeddings
from tf_msemb.evaluation.retrieval import precision_at_k
from tf_msemb.evaluation.retrieval import translation_accuracy
from tf_msemb.evaluation.sts import cross_lingual
from tf_msemb.data.labeled_pairs import read_semeval_sts
from tf_msemb.data.labeled_pairs import read_stsb_csv
from tf_msemb.data.labeled_pairs import read_stsb_tsv
from tf_msemb.data.labeled_pairs import semeval_sts_tracks
from tf_msemb.evaluation.sts import correlations
from tf_msemb.evaluation.sts import language_bias
from tf_msemb.evaluation.sts import row_cosines

flags.DEFINE_string("model", None, "Export directory or training model_dir.")
flags.DEFINE_enum("task", "retrieval", ["retrieval", "sts", "mining", "classify"], "What to evaluate.")
flags.DEFINE_multi_string("pair", [], "SRC_FILE,TGT_FILE of line-aligned sentences (retrieval).")
flags.DEFINE_multi_string("pool_pair", [], "SRC_FILE,TGT_FILE scored by P@k against all targets (retrieval).")
flags.DEFINE_multi_string("pool_distractors", [], "Extra target sentences added to every pool (retrieval).")
flags.DEFINE_multi_string("doc_pair", [], "SRC_FILE,TGT_FILE of doc_id<TAB>sentence lines (retrieval).")
flags.DEFINE_enum("index", "exact", list(search.INDEXES),
                  "Search for P@k retrieval and mining: exact (TensorFlow), flat (faiss), approximate ivf, ivfpq, hnsw.")
flags.DEFINE_integer("nprobe", 16, "Cells visited per query by the ivf indexes.")
flags.DEFINE_multi_string("sts_tsv", [], "An STS benchmark TSV file (sts).")
flags.DEFINE_string("stsb_dir", None, "Directory of multilingual STS-b CSVs (sts).")
flags.DEFINE_multi_string("stsb_pair", [], "Language pair of --stsb_dir, e.g. en-de or de-de (sts).")
flags.DEFINE_string("split", "dev", "Split of the multilingual STS-b files (sts).")
flags.DEFINE_string("semeval_dir", None, "Directory of SemEval STS.input.*.txt / STS.gs.*.txt files (sts).")
flags.DEFINE_bool("joined", False, "Also score all STS sets as one pool and report the language bias (sts).")
flags.DEFINE_string("src_train", None, "Train split: source id<TAB>sentence file (mining).")
flags.DEFINE_string("tgt_train", None, "Train split: target id<TAB>sentence file (mining).")
flags.DEFINE_string("gold_train", None, "Train split: id1<TAB>id2 gold pairs; its best-F1 threshold is used (mining).")
flags.DEFINE_string("src", None, "Test split: source id<TAB>sentence file (mining).")
flags.DEFINE_string("tgt", None, "Test split: target id<TAB>sentence file (mining).")
flags.DEFINE_string("gold", None, "Test split: id1<TAB>id2 gold pairs, scored at the train threshold (mining).")
flags.DEFINE_enum("margin", "ratio", list(mining.MARGINS), "Margin score (mining).")
flags.DEFINE_enum("selection", "intersect", list(mining.SELECTIONS), "Candidate selection (mining).")
flags.DEFINE_integer("knn", 4, "Neighbours per direction (mining).")
flags.DEFINE_string("classify_train", None, "label<TAB>text file of language A (classify).")
flags.DEFINE_multi_string("classify_test", [], "label<TAB>text file of a language B (classify).")
flags.DEFINE_integer("seeds", 5, "Classifier trainings, each with its own seed (classify).")
flags.DEFINE_integer("batch_size", 64, "Sentences per encoding batch.")
flags.DEFINE_string("output", None, "Write the results as JSON here.")
flags.mark_flag_as_required("model")
FLAGS = flags.FLAGS


def _aligned_pair(spec, flag="--pair"):
    """`(name, src_lines, tgt_lines)` of a `SRC_FILE,TGT_FILE` spec of line-aligned files."""
    src_path, sep, tgt_path = spec.partition(",")
    if not sep:
        raise CorpusError(f"{flag}={spec!r} is not SRC_FILE,TGT_FILE.")
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}.")
    return f"{os.path.basename(src_path)} / {os.path.basename(tgt_path)}", src, tgt


def evaluate_retrieval(model, pairs, batch_size=64, verbose=True):
    """Returns `{"src_name / tgt_name": accuracies and size}` for each pair spec."""
    results = {}
    for spec in pairs:
        name, src, tgt = _aligned_pair(spec)
        src_embeddings = encode(model, src, batch_size, verbose)
        tgt_embeddings = encode(model, tgt, batch_size, verbose)
        results[name] = translation_accuracy(src_embeddings, tgt_embeddings) | {"size": len(src)}
    return results


def evaluate_pool_retrieval(model, pairs, distractors=(), index="exact", nprobe=16, batch_size=64, verbose=True):
    """P@1/3/10 of each aligned pair's source lines against all its targets plus the distractor lines."""
    extra = [line for path in distractors for line in read_lines(path)]
    extra_embeddings = encode(model, extra, batch_size, verbose) if extra else None
    results = {}
    for spec in pairs:
        name, src, tgt = _aligned_pair(spec, "--pool_pair")
        pool = encode(model, tgt, batch_size, verbose)
        if extra_embeddings is not None:
            pool = np.concatenate([pool, extra_embeddings])
        scores = precision_at_k(encode(model, src, batch_size, verbose), pool, np.arange(len(src)), index=index,
                                nprobe=nprobe)
        results[f"{name} (pool {len(pool)})"] = scores | {"size": len(src)}
    return results


def evaluate_documents(model, pairs, index="exact", nprobe=16, batch_size=64, verbose=True):
    """P@1/3/10 of source documents finding the target document with the same id."""
    results = {}
    for spec in pairs:
        paths = spec.split(",")
        if len(paths) != 2:
            raise CorpusError(f"--doc_pair={spec!r} is not SRC_FILE,TGT_FILE.")
        (src_ids, src_docs), (tgt_ids, tgt_docs) = (
            document_embeddings(ids, encode(model, sentences, batch_size, verbose))
            for ids, sentences in map(mining.read_id_sentences, paths)
        )
        row = {doc: i for i, doc in enumerate(tgt_ids)}
        missing = [doc for doc in src_ids if doc not in row]
        if missing:
            raise CorpusError(f"{paths[1]} lacks documents {missing[:5]} of {paths[0]}.")
        gold = [row[doc] for doc in src_ids]
        name = f"documents {os.path.basename(paths[0])} / {os.path.basename(paths[1])}"
        results[name] = precision_at_k(src_docs, tgt_docs, gold, index=index, nprobe=nprobe) | {"size": len(src_ids)}
    return results


def sts_sets(tsv_files=(), stsb_dir=None, stsb_pairs=(), split="dev", semeval_dir=None):
    """`{name: (sentences1, sentences2, gold)}` for the requested STS sets."""
    sets = {os.path.basename(path): read_stsb_tsv(path) for path in tsv_files}
    if semeval_dir:
        for track, paths in semeval_sts_tracks(semeval_dir).items():
            sets[f"semeval {track}"] = read_semeval_sts(*paths)
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


def mine_split(model, spec, k=4, margin="ratio", selection="intersect", batch_size=64, verbose=True, index="exact",
               nprobe=16):
    """Candidates `(score, src_id, tgt_id)` and the gold set of one `SRC,TGT,GOLD` split."""
    paths = spec.split(",")
    if len(paths) != 3:
        raise CorpusError(f"{spec!r} is not SRC,TGT,GOLD.")
    src_ids, src = mining.read_id_sentences(paths[0])
    tgt_ids, tgt = mining.read_id_sentences(paths[1])
    forward, backward = mining.margin_candidates(
        encode(model, src, batch_size, verbose), encode(model, tgt, batch_size, verbose), k, margin, index,
        nprobe=nprobe,
    )
    chosen = mining.select(forward, backward, selection)
    return [(s, src_ids[i], tgt_ids[j]) for s, i, j in chosen], mining.read_gold(paths[2])


def evaluate_mining(model, train_spec, test_spec, k=4, margin="ratio", selection="intersect", batch_size=64,
                    verbose=True, index="exact", nprobe=16):
    """P/R/F1 on train at its best threshold, and on test at that same threshold."""
    candidates, gold = mine_split(model, train_spec, k, margin, selection, batch_size, verbose, index, nprobe)
    threshold, train_metrics = mining.best_threshold(candidates, gold)
    results = {"train": train_metrics | {"threshold": threshold, "size": len(gold)}}
    if test_spec:
        candidates, gold = mine_split(model, test_spec, k, margin, selection, batch_size, verbose, index, nprobe)
        kept = [(i, j) for s, i, j in candidates if s >= threshold]
        results["test"] = mining.precision_recall_f1(kept, gold) | {"threshold": threshold, "size": len(gold)}
    return results


def evaluate_classification(model, train_path, test_paths, seeds=5, batch_size=64, verbose=True):
    """Zero-shot transfer accuracy (mean, std over seeds) on each test file."""
    labels, texts = read_labeled_texts(train_path)
    train = (encode(model, texts, batch_size, verbose), labels)
    tests = {}
    for path in test_paths:
        labels, texts = read_labeled_texts(path)
        tests[os.path.basename(path)] = (encode(model, texts, batch_size, verbose), labels)
    return zero_shot_transfer(train, tests, seeds=tuple(range(seeds)))


def format_table(results, scale=1.0):
    """One row per evaluated set, a column per metric (values times `scale`, thresholds as they are)."""
    columns = list(dict.fromkeys(c for r in results.values() for c in r if c != "size"))

    def value(r, c):
        if c not in r:
            return f"{'-':>9}"
        return f"{r[c] if c == 'threshold' else scale * r[c]:>9.2f}"

    lines = [f"{'set':<40} {'size':>6} " + " ".join(f"{c:>9}" for c in columns)]
    for name, r in results.items():
        lines.append(f"{name[-40:]:<40} {r['size']:>6} " + " ".join(value(r, c) for c in columns))
    return "\n".join(lines)


def main(argv):
    del argv
    if FLAGS.task == "retrieval":
        if not (FLAGS.pair or FLAGS.pool_pair or FLAGS.doc_pair):
            raise CorpusError("retrieval needs --pair, --pool_pair or --doc_pair=SRC_FILE,TGT_FILE")
        model = load_model(FLAGS.model)
        results = evaluate_retrieval(model, FLAGS.pair, FLAGS.batch_size)
        results |= evaluate_pool_retrieval(model, FLAGS.pool_pair, FLAGS.pool_distractors, FLAGS.index,
                                           FLAGS.nprobe, FLAGS.batch_size)
        results |= evaluate_documents(model, FLAGS.doc_pair, FLAGS.index, FLAGS.nprobe, FLAGS.batch_size)
    elif FLAGS.task == "classify":
        if not (FLAGS.classify_train and FLAGS.classify_test):
            raise CorpusError("classify needs --classify_train=FILE and --classify_test=FILE")
        results = evaluate_classification(load_model(FLAGS.model), FLAGS.classify_train, FLAGS.classify_test,
                                          FLAGS.seeds, FLAGS.batch_size)
    elif FLAGS.task == "mining":
        train = (FLAGS.src_train, FLAGS.tgt_train, FLAGS.gold_train)
        test = (FLAGS.src, FLAGS.tgt, FLAGS.gold)
        if not all(train) or any(test) and not all(test):
            raise CorpusError("mining needs --src_train, --tgt_train and --gold_train (and for a test split "
                              "all of --src, --tgt and --gold)")
        test_spec = ",".join(test) if all(test) else None
        results = evaluate_mining(load_model(FLAGS.model), ",".join(train), test_spec, FLAGS.knn,
                                  FLAGS.margin, FLAGS.selection, FLAGS.batch_size, index=FLAGS.index,
                                  nprobe=FLAGS.nprobe)
    else:
        sets = sts_sets(FLAGS.sts_tsv, FLAGS.stsb_dir, FLAGS.stsb_pair, FLAGS.split, FLAGS.semeval_dir)
        if not sets:
            raise CorpusError("sts needs --sts_tsv=FILE, --semeval_dir=DIR or --stsb_dir=DIR with --stsb_pair=L1-L2")
        results = evaluate_sts(load_model(FLAGS.model), sets, FLAGS.batch_size, joined=FLAGS.joined)
    # Accuracies and P/R/F1 are fractions; correlations are already x100.
    print(format_table(results, scale=1.0 if FLAGS.task == "sts" else 100.0))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    cli.run(main)
