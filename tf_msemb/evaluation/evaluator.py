"""`Evaluator`: one evaluation task, shared by the evaluate CLI and the train loop.

An evaluator is built once from its data (files are read and checked then)
and called with `embed`, a function from a list of strings to their unit
vectors (`[n, d]` float32 NumPy). The CLI's `embed` runs a loaded export;
training's runs the encoder in-process through the export's own
tokenizer + inference path, so a dev figure equals what the export gives.
"""

import os

import numpy as np

from tf_msemb.text_files import CorpusError


class Evaluator:
    """Subclasses set `name` and implement `evaluate`.

    `evaluate(embed)` returns `{set name: {metric: value, "size": n}}`, one
    row per evaluated set (what the CLI prints and writes). Calling the
    evaluator flattens that to `{"<name>/<set>/<metric>": value}` plus, for
    every metric all sets share, its mean over sets as `"<name>/<metric>"`
    (e.g. `"retrieval/mean"`), which is what training logs and selects on.
    Rows in `derived_rows` (computed from the other sets, like STS's
    "joined", or tuned on, like mining's "train") and metrics in
    `setting_metrics` (values chosen, not scored, like mining's "threshold")
    are flattened but left out of the means.
    """

    name = "eval"
    derived_rows = ()
    setting_metrics = ()

    def evaluate(self, embed):
        raise NotImplementedError

    def summary(self, per_set):
        """`{"<name>/<metric>": mean over sets}` of an `evaluate` result."""
        return set_means(self.name, per_set, self.derived_rows, self.setting_metrics)

    def __call__(self, embed):
        per_set = self.evaluate(embed)
        return flatten(self.name, per_set, self.derived_rows, self.setting_metrics) | self.summary(per_set)


def set_means(name, per_set, derived_rows=(), setting_metrics=()):
    """`{"name/metric": mean over sets}` for the metrics every set has (sizes, derived rows and settings left out)."""
    rows = [row for set_name, row in per_set.items() if set_name not in derived_rows]
    skipped = {"size", *setting_metrics}
    shared = [metric for metric in (rows[0] if rows else {})
              if metric not in skipped and all(metric in r for r in rows)]
    return {f"{name}/{metric}": float(np.mean([r[metric] for r in rows])) for metric in shared}


def flatten(name, per_set, derived_rows=(), setting_metrics=()):
    """`{set: {metric: value}}` -> `{"name/set/metric": value}` (sizes left out) plus `set_means`."""
    flat = {f"{name}/{set_name}/{metric}": float(value) for set_name, row in per_set.items()
            for metric, value in row.items() if metric != "size"}
    return flat | set_means(name, per_set, derived_rows, setting_metrics)


def path_list(paths):
    """A file name or a list of them, as a list (so a gin binding may give one file as a plain string)."""
    return [paths] if isinstance(paths, str) else list(paths)


def file_tuples(specs, fields):
    """Checks that each of `specs` is a sequence of one file per name in `fields`; returns them as tuples."""
    tuples = []
    for spec in specs:
        if not isinstance(spec, (list, tuple)) or len(spec) != len(fields):
            raise CorpusError(f"{spec!r} is not a ({', '.join(fields)}) tuple of files.")
        tuples.append(tuple(spec))
    return tuples


def set_names(file_groups):
    """A set name per group of files: base names joined by " / ", or the paths as given where base names clash
    (`de/test.src` and `fr/test.src`), so two sets never share a name and neither hides the other."""
    short = [" / ".join(os.path.basename(path) for path in group) for group in file_groups]
    return [name if short.count(name) == 1 else " / ".join(group) for name, group in zip(short, file_groups)]


def named_files(specs, fields, binding):
    """`[(set name, files)]` of `file_tuples(specs, fields)`: at least one group, none given twice.

    `binding` names the argument in errors (e.g. `"TranslationRetrieval.pairs"`).
    """
    groups = file_tuples(specs, fields)
    if not groups:
        raise CorpusError(f"{binding} is empty: give at least one ({', '.join(fields)}) set.")
    names = set_names(groups)
    for name in names:
        if names.count(name) > 1:
            raise CorpusError(f"{binding} gives {name} twice.")
    return list(zip(names, groups))
