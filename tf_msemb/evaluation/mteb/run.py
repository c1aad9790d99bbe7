"""Running MTEB tasks on exports and on sentence-transformers peers, into MTEB's results folder and one table.

Tasks are MTEB's own by name (`STS17`, `Tatoeba`, `BUCC.v2`: MTEB downloads
their data from the Hugging Face Hub) or local ones read here from files
(`evaluation.mteb.tasks`). Every model's results go to
`<output>/results/<model name>/<revision>/<task>.json`, MTEB's layout, so
MTEB's own tools (`mteb.load_results`, the leaderboard's loaders) read them.
A peer (a sentence-transformers model directory) runs through MTEB's own
`SentenceTransformerEncoderWrapper` in another interpreter
(`evaluation.mteb.peer`), which can be a venv without TensorFlow.
"""

import json
import os
import sys
import tempfile

import mteb

from tf_msemb.data.labeled_pairs import read_stsb_csv
from tf_msemb.data.labeled_pairs import read_stsb_tsv
from tf_msemb.evaluation.mteb.tasks import local_bitext_mining
from tf_msemb.evaluation.mteb.tasks import local_sts
from tf_msemb.evaluation.mteb.tasks import main_scores
from tf_msemb.evaluation.mteb.tasks import task_spec
from tf_msemb import interpreter
from tf_msemb.evaluation.tables import text_table
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines


def _base_name(path):
    name = os.path.basename(path)
    for suffix in (".gz", ".csv", ".tsv", ".txt"):
        name = name.removesuffix(suffix)
    return name


def _language(code, what):
    """`code` if MTEB knows it (ISO 639-3, optionally `-Script`), else a `CorpusError` naming `what`."""
    from mteb.languages.check_language_code import check_language_code

    try:
        check_language_code(code)
    except ValueError:
        raise CorpusError(f"{what}: {code!r} is not an ISO 639-3 language code (eng, deu, ...) that MTEB knows; "
                          "name the languages in the spec.") from None
    return code


def local_sts_task(spec):
    """`FILE[,LANG[,LANG2]]`: an STS benchmark TSV, or a multilingual STS-b CSV (a `.csv` named `stsb-*`);
    languages default to eng. MTEB files it under the split `validation`."""
    path, *languages = spec.split(",")
    sentences1, sentences2, scores = (read_stsb_csv if path.endswith(".csv") and "stsb-" in os.path.basename(path)
                                      else read_stsb_tsv)(path)
    languages = [_language(code, f"--mteb_sts={spec}") for code in languages or ["eng"]]
    return local_sts(f"LocalSTS-{_base_name(path)}", sentences1, sentences2, scores, languages,
                    description=f"STS pairs of {path}")


def local_bitext_task(spec):
    """`SRC_FILE,TGT_FILE[,SRC_LANG-TGT_LANG]`: line-aligned files; languages default to the files' suffixes
    (`tatoeba.deu-eng.deu` is deu)."""
    parts = spec.split(",")
    if len(parts) not in (2, 3):
        raise CorpusError(f"--mteb_bitext={spec!r} is not SRC_FILE,TGT_FILE[,SRC_LANG-TGT_LANG].")
    source, target = parts[:2]
    codes = parts[2].split("-", 1) if len(parts) == 3 else [_base_name(source).rsplit(".", 1)[-1],
                                                           _base_name(target).rsplit(".", 1)[-1]]
    languages = [_language(code, f"--mteb_bitext={spec}") for code in codes]
    sources, targets = read_lines(source), read_lines(target)
    if len(sources) != len(targets):
        raise CorpusError(f"{source} has {len(sources)} lines but {target} has {len(targets)}.")
    name = os.path.commonprefix([_base_name(source), _base_name(target)]).rstrip(".") or _base_name(source)
    return local_bitext_mining(f"LocalBitext-{name}", sources, targets, languages,
                             description=f"line-aligned {source} and {target}")


def hub_tasks(names, languages=()):
    """MTEB's tasks by name; their data come from the Hub. With `languages` (ISO 639-3), a multilingual task
    keeps the subsets all of whose languages are listed (`deu,eng`: Tatoeba's deu-eng only)."""
    try:
        return list(mteb.get_tasks(tasks=list(names), languages=list(languages) or None,
                                   exclusive_language_filter=bool(languages)))
    except KeyError as e:
        raise CorpusError(f"--mteb_tasks: {e.args[0]}") from None


def check_names(tasks):
    """Refuses two tasks of one name: MTEB would write one's results over the other's."""
    names = [task.metadata.name for task in tasks]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise CorpusError(f"Two MTEB tasks are named {twice[0]}: local tasks take their files' base names, so give "
                          "files of different names.")


def evaluate(model, tasks, output_dir, batch_size=64, show_progress_bar=False):
    """MTEB on `model` (an `ExportEncoder` or any MTEB encoder), results written under `output_dir`; the
    main scores (`main_scores`). Tasks are always run afresh (no reuse of earlier results in the folder);
    `show_progress_bar` shows MTEB's bar over the tasks."""
    result = mteb.evaluate(model, tasks, cache=mteb.ResultCache(output_dir), overwrite_strategy="always",
                           encode_kwargs={"batch_size": batch_size, "show_progress_bar": False},
                           show_progress_bar=show_progress_bar)
    return main_scores(result)


def evaluate_peer(python, model_dir, hub_names, local, output_dir, batch_size=64, languages=(),
                  model_prompts=None):
    """MTEB on the sentence-transformers model in `model_dir`, run by `python -m tf_msemb.evaluation.mteb.peer`
    (sentence-transformers, torch and mteb installed there); the same local tasks (`local`, built here)."""
    python = python or sys.executable
    interpreter.require(python, ["torch", "sentence_transformers", "mteb"],
                        "torch, sentence-transformers and mteb (the mteb extra)")
    request = {"model": os.path.abspath(model_dir), "tasks": list(hub_names), "languages": list(languages),
               "local": [task_spec(task) for task in local], "output": os.path.abspath(output_dir),
               "batch_size": batch_size, "model_prompts": model_prompts}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(request, f)
    try:
        reply = interpreter.run_json(["-m", "tf_msemb.evaluation.mteb.peer", f.name],
                                     f"the sentence-transformers side on {model_dir}", python)
    finally:
        os.remove(f.name)
    return reply["name"], {tuple(row[:3]): row[3] for row in reply["scores"]}


def format_table(columns):
    """One row per (task, subset, split), a column per model (`{model name: main_scores}`), x100."""
    keys = list(dict.fromkeys(key for scores in columns.values() for key in scores))
    rows = [(key, {name: scores[key] for name, scores in columns.items() if key in scores}) for key in keys]
    return text_table([("task", 28, "<"), ("subset", 10, "<"), ("split", 10, "<")], rows, list(columns))
