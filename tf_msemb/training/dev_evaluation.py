"""Evaluation during training: dev metrics, model selection and early stopping.

Every `eval_every` steps and at the end, the encoder is run through the
export's own tokenizer + inference path in this process (no export, no
reload), so a dev figure equals what the export gives. Results go to the
progress output, TensorBoard and `model_dir/eval_results.jsonl`. With a
`best_metric`, the best step so far is kept as the checkpoint `best/ckpt`
(the whole run state at that step, written when the step is evaluated) and,
when the run ends, as `export/best` (its metadata names the metric, value
and step): one export per run instead of one per improvement, which on a
short run would cost more than the evaluations. The best value, its step,
the count of evaluations without improvement and the step `export/best`
holds are checkpointed with the run, so a resumed run remembers them.
"""

import functools
import json
import math
import os

import tensorflow as tf

from tf_msemb.evaluation.encoding import Memoized
from tf_msemb.evaluation.encoding import encode
from tf_msemb.export.saved_model import inference_module

MODES = ("max", "min")


class DevEvaluation:
    """The evaluators of a run and its model selection.

    Args:
        evaluators: `evaluation.evaluator.Evaluator`s.
        best_metric: the flat metric name to select on (e.g. `"retrieval/mean"`), or None.
        mode: `"max"` or `"min"`: which direction is better.
        patience: stop after this many evaluations without improvement (None: never).
        batch_size: sentences per encoding batch.
    """

    def __init__(self, evaluators, best_metric=None, mode="max", patience=None, batch_size=64):
        if mode not in MODES:
            raise ValueError(f"train.best_mode must be one of {MODES}, not {mode!r}.")
        if patience is not None and best_metric is None:
            raise ValueError("Early stopping (train.patience) needs train.best_metric.")
        self.evaluators = list(evaluators)
        self.best_metric, self.mode, self.patience, self.batch_size = best_metric, mode, patience, batch_size
        worst = -math.inf if mode == "max" else math.inf
        self.best_value = tf.Variable(worst, dtype=tf.float64, trainable=False, name="best_value")
        self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
        self.stale = tf.Variable(0, dtype=tf.int64, trainable=False, name="evaluations_without_improvement")
        self.last_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="last_evaluated_step")
        self.exported_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_exported_step")
        self._module, self._module_of = None, None

    def state(self):
        """What the run's checkpoint must hold to resume the selection."""
        return tf.train.Checkpoint(best_value=self.best_value, best_step=self.best_step, stale=self.stale,
                                   last_step=self.last_step, exported_step=self.exported_step)

    def metrics(self, tokenizer, encoder):
        """Every evaluator's flat metrics for the encoder as the export would run it.

        The float32 inference module is built once per encoder and reused: it
        reads the encoder's variables (no copies), so its traced graphs stay
        valid as training moves them.
        """
        if self._module_of is None or self._module_of[0] is not tokenizer or self._module_of[1] is not encoder:
            self._module, self._module_of = inference_module(tokenizer, encoder), (tokenizer, encoder)
        embed = Memoized(functools.partial(encode, self._module, batch_size=self.batch_size, verbose=False))
        results = {}
        for evaluator in self.evaluators:
            results |= evaluator(embed)
        return results

    def record(self, step, results):
        """Updates the selection with this step's results; returns whether they are the best so far."""
        self.last_step.assign(step)
        if self.best_metric is None:
            return False
        if self.best_metric not in results:
            raise ValueError(f"train.best_metric {self.best_metric!r} is not among the dev metrics: "
                             f"{', '.join(sorted(results))}.")
        value = results[self.best_metric]
        better = value > self.best_value.numpy() if self.mode == "max" else value < self.best_value.numpy()
        if better:
            self.best_value.assign(value)
            self.best_step.assign(step)
            self.stale.assign(0)
        else:
            self.stale.assign_add(1)
        return bool(better)

    @property
    def exhausted(self):
        """Whether early stopping says to stop."""
        return self.patience is not None and int(self.stale.numpy()) >= self.patience

    @property
    def selection(self):
        """The best step's facts, for `export/best`'s metadata."""
        return {"metric": self.best_metric, "mode": self.mode, "value": float(self.best_value.numpy()),
                "step": int(self.best_step.numpy())}


def write_results(model_dir, step, results):
    """Appends `{"step": step, metric: value, ...}` to `model_dir/eval_results.jsonl`."""
    with open(os.path.join(model_dir, "eval_results.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step} | results) + "\n")
