"""Evaluates an exported model: `python -m tf_msemb.evaluate --model=PATH --task=retrieval ...`.

`--model` is an export directory or a training `model_dir` (its `export/final`).
With `--all_exports`, `--model` is a training `model_dir` and every versioned
export `export/<step>` is evaluated, in step order, and `export/best` too
when the step it holds has no versioned export (a run evaluated more often
than it exported): the table then has a row per step (and `best`) and a
column per summary metric (`<evaluator>/<metric>`, the mean over sets that
training logs), and `--output` writes `{step: results}`. The data are read
once and every export is scored on the same sets.

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
rescore_one_sided), `--selection` (forward, backward, intersect, max), `--knn`, `--pick` (nearest, best_of_k;
default: the margin's paper's rule).

classify: zero-shot cross-lingual transfer. An MLP trained on the frozen
embeddings of `--classify_train=FILE` (`label<TAB>text`, language A) is
tested on each `--classify_test=FILE` (language B); mean and std over `--seeds`.

distillation: seed 001's dev metric, the MSE of the model's vectors to
`--teacher`'s (an export, a model_dir or a `load_pretrained` name) on each
held-out `--pair=SRC_FILE,TGT_FILE`: `mse_src` (source side), `mse_tgt`
(translation vs the teacher's source vector) and their sum `mse`, between
unit vectors (see `evaluation.distillation`).

mteb: MTEB (the `mteb` extra) on the export, through
`evaluation.mteb.encoder.ExportEncoder` (the export's named prompts applied by
task, as MTEB applies a sentence-transformers model's): MTEB's tasks named in
`--mteb_tasks` (their data from the Hugging Face Hub; `--mteb_languages`
narrows multilingual ones), local STS sets (`--mteb_sts=FILE[,LANG]`, STS
benchmark TSV or multilingual STS-b CSV) and local bitext-mining sets
(`--mteb_bitext=SRC_FILE,TGT_FILE[,SRC-TGT]`, scored as MTEB scores
Tatoeba). MTEB's results folder goes to `--mteb_output`; each
`--mteb_peer=DIR` (a sentence-transformers model) is scored beside the export
by MTEB's own wrapper in `--peer_python`; the table has a column per model
(main scores x100) and a row per task, subset and split.

Each other task runs the evaluator classes of `tf_msemb.evaluation` (the ones
`train.evaluators` lists). Results are printed as a table (fractions and
MSEs x100, correlations as they are); `--output` writes them as JSON.
"""

import functools
import json

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.evaluation import mining
from tf_msemb.evaluation import search
from tf_msemb.evaluation.classification import ZeroShotClassification
from tf_msemb.evaluation.distillation import DistillationMSE
from tf_msemb.evaluation.encoding import Memoized
from tf_msemb.evaluation.encoding import run_exports
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.mining import MiningEvaluator
from tf_msemb.evaluation.retrieval import DocumentRetrieval
from tf_msemb.evaluation.retrieval import PoolRetrieval
from tf_msemb.evaluation.retrieval import TranslationRetrieval
from tf_msemb.evaluation.sts import STSEvaluator
from tf_msemb.evaluation.tables import text_table
from tf_msemb.text_files import CorpusError

flags.DEFINE_string("model", None, "Export directory or training model_dir.")
flags.DEFINE_bool("all_exports", False,
                  "Evaluate every versioned export model_dir/export/<step> of --model, in step order, and "
                  "export/best where its step has none.")
flags.DEFINE_enum("task", "retrieval", ["retrieval", "sts", "mining", "classify", "distillation", "mteb"],
                  "What to evaluate.")
flags.DEFINE_multi_string("pair", [], "SRC_FILE,TGT_FILE of line-aligned sentences (retrieval, distillation).")
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
flags.DEFINE_enum("pick", None, list(mining.PICKS), "Each query's candidate: the cosine nearest (seed 004) or the best "
                  "margin of the k (Artetxe & Schwenk); default: the margin's paper's rule (mining).")
flags.DEFINE_string("classify_train", None, "label<TAB>text file of language A (classify).")
flags.DEFINE_multi_string("classify_test", [], "label<TAB>text file of a language B (classify).")
flags.DEFINE_integer("seeds", 5, "Classifier trainings, each with its own seed (classify).")
flags.DEFINE_string("teacher", None, "Teacher export, model_dir or load_pretrained name (distillation).")
flags.DEFINE_list("mteb_tasks", [], "MTEB task names, e.g. STS17,Tatoeba,BUCC.v2 (mteb; data from the Hub).")
flags.DEFINE_list("mteb_languages", [], "ISO 639-3 codes the MTEB tasks are narrowed to, e.g. deu,eng: a subset is "
                  "kept when all its languages are listed (mteb).")
flags.DEFINE_multi_string("mteb_sts", [], "FILE[,LANG[,LANG2]]: a local STS set as an MTEB task (mteb).")
flags.DEFINE_multi_string("mteb_bitext", [], "SRC_FILE,TGT_FILE[,SRC-TGT]: local bitext mining as an MTEB task "
                          "(mteb).")
flags.DEFINE_string("mteb_output", "mteb_results", "MTEB's results folder (mteb).")
flags.DEFINE_multi_string("mteb_prompt", [], "NAME=TEXT: a named prompt replacing the export's own, e.g. "
                          "'query=query: ' (mteb; also given to the peers).")
flags.DEFINE_multi_string("mteb_peer", [], "A sentence-transformers model directory scored beside the export "
                          "(mteb).")
flags.DEFINE_string("peer_python", None, "Interpreter with sentence-transformers, torch and mteb for --mteb_peer "
                    "(default: this one).")
flags.DEFINE_integer("batch_size", 64, "Sentences per encoding batch.")
flags.DEFINE_string("output", None, "Write the results as JSON here.")
flags.mark_flag_as_required("model")
FLAGS = flags.FLAGS


def file_pairs(specs, flag):
    """`(src, tgt)` paths of `SRC_FILE,TGT_FILE` flag values."""
    pairs = []
    for spec in specs:
        paths = spec.split(",")
        if len(paths) != 2:
            raise CorpusError(f"{flag}={spec!r} is not SRC_FILE,TGT_FILE.")
        pairs.append(tuple(paths))
    return pairs


def build_evaluators():
    """The evaluators of `--task`, built (their files read and checked, a distillation teacher's vectors
    computed) before the model under evaluation is loaded."""
    if FLAGS.task == "retrieval":
        if not (FLAGS.pair or FLAGS.pool_pair or FLAGS.doc_pair):
            raise CorpusError("retrieval needs --pair, --pool_pair or --doc_pair=SRC_FILE,TGT_FILE")
        evaluators = []
        if FLAGS.pair:
            evaluators.append(TranslationRetrieval(file_pairs(FLAGS.pair, "--pair")))
        if FLAGS.pool_pair:
            evaluators.append(PoolRetrieval(file_pairs(FLAGS.pool_pair, "--pool_pair"), FLAGS.pool_distractors,
                                            FLAGS.index, FLAGS.nprobe))
        if FLAGS.doc_pair:
            evaluators.append(DocumentRetrieval(file_pairs(FLAGS.doc_pair, "--doc_pair"), FLAGS.index, FLAGS.nprobe))
        return evaluators
    if FLAGS.task == "classify":
        if not (FLAGS.classify_train and FLAGS.classify_test):
            raise CorpusError("classify needs --classify_train=FILE and --classify_test=FILE")
        return [ZeroShotClassification(FLAGS.classify_train, FLAGS.classify_test, FLAGS.seeds)]
    if FLAGS.task == "mining":
        train = (FLAGS.src_train, FLAGS.tgt_train, FLAGS.gold_train)
        test = (FLAGS.src, FLAGS.tgt, FLAGS.gold)
        if not all(train) or any(test) and not all(test):
            raise CorpusError("mining needs --src_train, --tgt_train and --gold_train (and for a test split "
                              "all of --src, --tgt and --gold)")
        return [MiningEvaluator(train, test if all(test) else None, k=FLAGS.knn, margin=FLAGS.margin,
                                selection=FLAGS.selection, index=FLAGS.index, nprobe=FLAGS.nprobe, pick=FLAGS.pick)]
    if FLAGS.task == "distillation":
        if not (FLAGS.pair and FLAGS.teacher):
            raise CorpusError("distillation needs --pair=SRC_FILE,TGT_FILE and --teacher")
        return [DistillationMSE(file_pairs(FLAGS.pair, "--pair"), FLAGS.teacher, FLAGS.batch_size)]
    if not (FLAGS.sts_tsv or FLAGS.semeval_dir or FLAGS.stsb_dir and FLAGS.stsb_pair):
        raise CorpusError("sts needs --sts_tsv=FILE, --semeval_dir=DIR or --stsb_dir=DIR with --stsb_pair=L1-L2")
    return [STSEvaluator(FLAGS.sts_tsv, FLAGS.stsb_dir, FLAGS.stsb_pair, FLAGS.split, FLAGS.semeval_dir, FLAGS.joined)]


def evaluate_export(evaluators, path, batch_size=64):
    """Every evaluator on the export at `path`: `({set: metrics}, {"<evaluator>/<metric>": mean over sets})`."""
    embed = Memoized(functools.partial(encode, load_model(path), batch_size=batch_size))
    results, summary = {}, {}
    for evaluator in evaluators:
        per_set = evaluator.evaluate(embed)
        results |= per_set
        summary |= evaluator.summary(per_set)
    return results, summary


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


def format_steps(summaries, scale=1.0):
    """One row per export step (or `best`), a column per summary metric (values times `scale`)."""
    columns = list(dict.fromkeys(c for s in summaries.values() for c in s))
    return text_table([("step", 8, ">")], [((step,), s) for step, s in summaries.items()], columns, scale)


def mteb_prompts():
    """`--mteb_prompt=NAME=TEXT` values as a dict, or None."""
    prompts = {}
    for spec in FLAGS.mteb_prompt:
        name, equals, text = spec.partition("=")
        if not equals:
            raise CorpusError(f"--mteb_prompt={spec!r} is not NAME=TEXT.")
        prompts[name] = text
    return prompts or None


def export_paths():
    """`--model`, or with `--all_exports` its run's versioned exports in step order and `export/best` where the step
    it holds has no versioned export."""
    if not FLAGS.all_exports:
        return [FLAGS.model]
    return [path for _, path in run_exports(FLAGS.model)]


def run_mteb():
    """`--task=mteb`: the export and every `--mteb_peer` on the same tasks; `{model name: main scores}`."""
    try:
        from tf_msemb.evaluation.mteb import run as mteb_run
        from tf_msemb.evaluation.mteb.encoder import ExportEncoder
    except ImportError as e:
        raise ImportError(f"--task=mteb needs the mteb extra (pip install 'tf_msemb[mteb]'): {e}") from e

    local = [mteb_run.local_sts_task(spec) for spec in FLAGS.mteb_sts]
    local += [mteb_run.local_bitext_task(spec) for spec in FLAGS.mteb_bitext]
    tasks = local + (mteb_run.hub_tasks(FLAGS.mteb_tasks, FLAGS.mteb_languages) if FLAGS.mteb_tasks else [])
    if not tasks:
        raise CorpusError("mteb needs --mteb_tasks=NAME,..., --mteb_sts=FILE or --mteb_bitext=SRC_FILE,TGT_FILE")
    mteb_run.check_names(tasks)
    columns = {}
    for path in export_paths():
        model = ExportEncoder(path, FLAGS.batch_size, mteb_prompts())
        columns[model.mteb_model_meta.name] = mteb_run.evaluate(model, tasks, FLAGS.mteb_output, FLAGS.batch_size,
                                                                show_progress_bar=True)
    for peer in FLAGS.mteb_peer:
        name, scores = mteb_run.evaluate_peer(FLAGS.peer_python, peer, FLAGS.mteb_tasks, local, FLAGS.mteb_output,
                                              FLAGS.batch_size, FLAGS.mteb_languages, mteb_prompts())
        columns[name] = scores
    print(mteb_run.format_table(columns))
    print(f"MTEB results: {FLAGS.mteb_output}/results")
    return {name: [[*key, score] for key, score in scores.items()] for name, scores in columns.items()}


def main(argv):
    del argv
    if FLAGS.task == "mteb":
        results = run_mteb()
        if FLAGS.output:
            with open(FLAGS.output, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2)
        return
    evaluators = build_evaluators()
    # Accuracies, P/R/F1 and MSEs are printed x100; correlations already are.
    scale = 1.0 if FLAGS.task == "sts" else 100.0
    if FLAGS.all_exports:
        results, summaries = {}, {}
        for step, path in run_exports(FLAGS.model):
            results[step], summaries[step] = evaluate_export(evaluators, path, FLAGS.batch_size)
        print(format_steps(summaries, scale))
    else:
        results, _ = evaluate_export(evaluators, FLAGS.model, FLAGS.batch_size)
        print(format_table(results, scale))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    cli.run(main)
