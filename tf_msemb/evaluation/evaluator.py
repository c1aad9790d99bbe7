"""`Evaluator`: one evaluation task, shared by the evaluate CLI and the train loop.

An evaluator is built once from its data (files are read and checked then)
and called with `embed`, a function from a list of strings to their unit
vectors (`[n, d]` float32 NumPy). The CLI's `embed` runs a loaded export;
training's runs the encoder in-process through the export's own
tokenizer + inference path, so a dev figure equals what the export gives.
"""

import numpy as np


class Evaluator:
    """Subclasses set `name` and implement `evaluate`.

    `evaluate(embed)` returns `{set name: {metric: value, "size": n}}`, one
    row per evaluated set (what the CLI prints and writes). Calling the
    evaluator flattens that to `{"<name>/<set>/<metric>": value}` plus, for
    every metric all sets share, its mean over sets as `"<name>/<metric>"`
    (e.g. `"retrieval/mean"`), which is what training logs and selects on.
    """

    name = "eval"

    def evaluate(self, embed):
        raise NotImplementedError

    def __call__(self, embed):
        return flatten(self.name, self.evaluate(embed))


def flatten(name, per_set):
    """`{set: {metric: value}}` -> `{"name/set/metric": value, "name/metric": mean over sets}` (sizes left out)."""
    flat = {f"{name}/{set_name}/{metric}": float(value) for set_name, row in per_set.items()
            for metric, value in row.items() if metric != "size"}
    rows = list(per_set.values())
    shared = [metric for metric in (rows[0] if rows else {}) if metric != "size" and all(metric in r for r in rows)]
    return flat | {f"{name}/{metric}": float(np.mean([r[metric] for r in rows])) for metric in shared}
