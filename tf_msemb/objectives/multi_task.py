"""`MultiTask`: one student trained by several objectives, each on its own data, in one run.

The tasks share the student (`encoder`) and the optimizer. In `"summed"`
mode every step reads one batch of every task and applies the gradient of
`sum_t w_t L_t` (each task's gradient times its weight, summed per
variable, clipped as one gradient); in `"alternating"` mode each step
trains one task on its batch, with gradient `w_t grad L_t`, the task drawn
round-robin or in proportion to its batches per epoch (sentence-transformers'
round-robin / proportional multi-dataset sampling; LaBSE, e5 and BGE-M3 mix
objectives this way). A task's step is the objective's own `train_step`,
so cross-replica negatives, gradient caching (`Task.gradient_cache_chunk`)
and momentum updates work per task as they do alone.
"""

import dataclasses
from typing import Callable

import gin
import numpy as np

from tf_msemb.data.corpora import corpus_streams
from tf_msemb.data.distributed import TaskInputs
from tf_msemb.losses.matryoshka import describe_widths
from tf_msemb.objectives.base import GradientSum
from tf_msemb.objectives.base import Objective

MODES = ("summed", "alternating")
SAMPLINGS = ("proportional", "round_robin")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Task:
    """One task of a `MultiTask` run (in gin, one scope per task: `MultiTask.tasks = [@distill/Task(), ...]`).

    Args:
        name: the task's name (its metrics log as `<name>/<metric>`).
        objective: the objective class, called with `encoder` and `run` (e.g.
            `@distill/MultilingualDistillation`, whose scope holds its options).
        dataset_fn: builds the task's input like `train.dataset_fn` (e.g.
            `@distill/make_distributed_dataset`, with `distill/make_dataset.corpora`);
            None: the run's `train.dataset_fn`.
        weight: w_t, the task's loss weight.
        global_batch_size: the task's pairs per step over all replicas (None: the run's).
        gradient_cache_chunk: the task's `train.gradient_cache_chunk` (rows; None: the plain step).
        matryoshka_widths: the task's `train.matryoshka_widths` (None: full vectors only).
        matryoshka_weights: the task's `train.matryoshka_weights`.
    """

    name: str = gin.REQUIRED
    objective: Callable = gin.REQUIRED
    dataset_fn: Callable = None
    weight: float = 1.0
    global_batch_size: int = None
    gradient_cache_chunk: int = None
    matryoshka_widths: tuple = None
    matryoshka_weights: tuple = None


def task_batches_per_epoch(task_input, global_batch_size):
    """Batches of `global_batch_size` in one pass over a task's corpora (manifests count their examples)."""
    examples = 0
    for corpus in task_input.corpora:
        counts = [count for _, count in corpus_streams(corpus).values()]
        if None in counts:
            raise ValueError(f"{corpus!r} is no manifest, so its examples cannot be counted for "
                             "MultiTask.sampling = 'proportional'; name manifests or use 'round_robin'.")
        examples += sum(counts)
    if not examples:
        raise ValueError("MultiTask.sampling = 'proportional' needs each task's corpora to count; a task's input "
                         "names none.")
    return examples / global_batch_size


@gin.configurable(denylist=["encoder"])
class MultiTask(Objective):
    """Several `Task`s on one student: `sum_t w_t L_t` each step, or one task a step.

    Logs `loss` (`sum_t w_t` times each task's mean loss since the last log
    line) and every task's own metrics as `<task>/<metric>`. Exports the
    student as `encoder`, and a task's other exports as `<task>/<name>`.

    Args:
        encoder: the student all tasks train.
        tasks: the `Task`s, in order (names unique).
        mode: `"summed"` (every task every step) or `"alternating"`.
        sampling: in alternating mode, `"proportional"` (a task's chance is
            its share of the batches per epoch, counted from its manifests) or
            `"round_robin"`; each step's task depends on `run.seed` and the step
            alone, so a resumed run draws the same tasks.
    """

    def __init__(self, encoder, tasks=gin.REQUIRED, mode="summed", sampling="round_robin", **kwargs):
        run = kwargs.get("run")
        for setting in ("gradient_cache_chunk", "matryoshka_widths"):
            if run is not None and getattr(run, setting) is not None:
                raise ValueError(f"train.{setting} = {getattr(run, setting)} applies to one objective; a multi-task "
                                 f"run sets it per task (Task.{setting}).")
        super().__init__(encoder, **kwargs)
        tasks = list(tasks)
        names = [task.name for task in tasks]
        if not tasks or len(set(names)) != len(names):
            raise ValueError(f"MultiTask.tasks needs at least one task and unique names; got {names}.")
        if mode not in MODES:
            raise ValueError(f"Unknown MultiTask.mode {mode!r}; choose from {MODES}.")
        if sampling not in SAMPLINGS:
            raise ValueError(f"Unknown MultiTask.sampling {sampling!r}; choose from {SAMPLINGS}.")
        self.tasks, self.mode, self.sampling = tasks, mode, sampling
        self.objectives = [
            task.objective(encoder=encoder, run=dataclasses.replace(
                self.run, global_batch_size=task.global_batch_size or self.run.global_batch_size,
                gradient_cache_chunk=task.gradient_cache_chunk, matryoshka_widths=task.matryoshka_widths,
                matryoshka_weights=task.matryoshka_weights))
            for task in tasks
        ]
        # TensorFlow checkpoints do not follow Keras' list attributes (a task's own state, e.g. an EMA teacher,
        # would not be saved): name each objective.
        for task, objective in zip(tasks, self.objectives):
            setattr(self, f"task_{task.name}", objective)
        self._probabilities = None

    @property
    def options(self):
        """The mode, the sampling and each task's name, objective, weight, batch and options (export metadata)."""
        return {"mode": self.mode, "sampling": self.sampling, "tasks": [
            {"name": task.name, "objective": type(objective).__name__, "weight": task.weight,
             "global_batch_size": objective.run.global_batch_size,
             "gradient_cache_chunk": task.gradient_cache_chunk, "matryoshka": describe_widths(objective.matryoshka),
             "options": objective.options}
            for task, objective in zip(self.tasks, self.objectives)]}

    def xla_obstacle(self, binding=None):
        """The first task's obstacle to XLA, named by its own binding (`<task>/Task.gradient_cache_chunk`)."""
        reasons = [objective.xla_obstacle(f"{task.name}/Task.gradient_cache_chunk")
                   for task, objective in zip(self.tasks, self.objectives)]
        return next((reason for reason in reasons if reason), None)

    @property
    def input_features(self):
        """Every task's features (each task's input carries its own)."""
        return [feature for objective in self.objectives for feature in objective.input_features]

    @property
    def metrics(self):
        return [metric for objective in self.objectives for metric in objective.metrics]

    def build(self, inputs_shape=None):
        for objective in self.objectives:
            objective.build()
        self.built = True

    def compile(self, optimizer, **kwargs):
        """Compiles with `optimizer`; every task steps with the same one."""
        super().compile(optimizer=optimizer, **kwargs)
        for objective in self.objectives:
            objective.compile(optimizer=self.optimizer)

    def exports(self):
        exports = {"encoder": (self.run.tokenizer, self.encoder)}
        for task, objective in zip(self.tasks, self.objectives):
            exports.update({f"{task.name}/{name}": value for name, value in objective.exports().items()
                            if name != "encoder"})
        return exports

    def make_input(self, dataset_fn, strategy, global_batch_size, **kwargs):
        """`data.distributed.TaskInputs`: each task's input from its own `dataset_fn`, batch and features."""
        inputs = {}
        for task, objective in zip(self.tasks, self.objectives):
            inputs[task.name] = objective.make_input(task.dataset_fn or dataset_fn, strategy,
                                                     objective.run.global_batch_size, **kwargs)
        if self.mode == "alternating" and self.sampling == "proportional":
            batches = np.array([task_batches_per_epoch(inputs[objective_task.name], objective.run.global_batch_size)
                                for objective_task, objective in zip(self.tasks, self.objectives)])
            self._probabilities = batches / batches.sum()
        return TaskInputs(inputs)

    def steps(self, inputs):
        if self.mode == "summed":
            return {None: (inputs.next_batch, self.train_step)}
        return {index: (inputs.tasks[task.name].next_batch, lambda data, index=index: self.task_step(index, data))
                for index, task in enumerate(self.tasks)}

    def step_key(self, step):
        """Summed: the one step. Alternating: the index of step `step`'s task (round-robin, or drawn from
        `run.seed` and the step)."""
        if self.mode == "summed":
            return None
        if self.sampling == "round_robin":
            return step % len(self.tasks)
        if self._probabilities is None:
            raise ValueError("MultiTask draws proportional tasks from its input's sizes; call make_input first.")
        return int(np.random.default_rng([self.run.seed, step]).choice(len(self.tasks), p=self._probabilities))

    def _step(self, indices, batches):
        """Steps the tasks at `indices` on their batches, applies `sum w_t grad L_t`, then their after-updates."""
        gradient_sum = GradientSum()
        for index, data in zip(indices, batches):
            with self.objectives[index].handing_gradients_to(gradient_sum, self.tasks[index].weight):
                self.objectives[index].train_step(data)
        self.apply_gradients(*gradient_sum.gradients_and_variables(self.trainable_variables))
        for update in gradient_sum.updates:
            update()
        return self._logs()

    def train_step(self, data):
        """Summed mode: one batch of every task (`{name: batch}`)."""
        return self._step(range(len(self.tasks)), [data[task.name] for task in self.tasks])

    def task_step(self, index, data):
        """Alternating mode: task `index` alone on its batch."""
        return self._step([index], [data])

    def _logs(self):
        logs = {}
        for task, objective in zip(self.tasks, self.objectives):
            logs.update({f"{task.name}/{metric.name}": metric.result() for metric in objective.metrics})
        logs["loss"] = sum(task.weight * logs[f"{task.name}/loss"] for task in self.tasks)
        return logs

    def get_config(self):
        raise NotImplementedError("A MultiTask objective is configured by gin (its tasks are callables); its "
                                  "`options` describe it.")
