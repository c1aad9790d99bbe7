"""The gin-configured train loop: strategy, data, objective, checkpoints, export.

The trainer knows objectives only through their contract (`objectives.base.Objective`):
it hands them the run's facts, lets them build their input from `train.dataset_fn`
(with the features they declare), runs the steps they name in the order they
say, and exports the encoders they name.
"""

import dataclasses
import json
import math
import os
import shutil
import tempfile
import time

import gin
import keras
import tensorflow as tf

from tf_msemb.data.pipeline import make_distributed_dataset
from tf_msemb.text_files import CorpusError
from tf_msemb.export.saved_model import copy_version
from tf_msemb.export.saved_model import export_version
from tf_msemb.losses.matryoshka import describe_widths
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import freeze_token_embeddings
from tf_msemb.models.encoder import set_packed_training
from tf_msemb.cpus import BFLOAT16_REQUIREMENT
from tf_msemb.cpus import require
from tf_msemb.models.pretrained import describe_source
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.objectives.base import RunFacts
from tf_msemb.provenance import describe_file
from tf_msemb.provenance import portable_path
from tf_msemb.provenance import portable_text
from tf_msemb.provenance import portable_value
from tf_msemb.training.checkpointing import RunCheckpoints
from tf_msemb.training.dev_evaluation import DevEvaluation
from tf_msemb.training.dev_evaluation import write_results
from tf_msemb.training.errors import NonFiniteLossError
from tf_msemb.training.errors import explain_data_error
from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.models.precision import precision_policy
from tf_msemb.models.precision import wrap_optimizer
from tf_msemb.training.progress import ProgressLine
from tf_msemb.training.progress import RunLog
from tf_msemb.training.strategy import decorrelate_dropout
from tf_msemb.training.strategy import is_chief
from tf_msemb.training.strategy import make_strategy


def _make_step_function(model, strategy, inputs, jit_compile):
    """`step(k)` -> the replica-averaged logs of the objective's step after `k` steps, on its next batch.

    Each of the objective's `steps(inputs)` is traced once; `step_key(k)` picks
    one. With `jit_compile`, XLA compiles each replica's step (the batch is
    read outside the compiled part: tf.data and string ops cannot be compiled).
    """

    def distributed(next_batch, replica_step):
        replica_step = tf.function(replica_step, jit_compile=True) if jit_compile else replica_step

        @tf.function
        def step():
            per_replica = strategy.run(replica_step, args=(next_batch(),))
            return {
                name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
                for name, value in per_replica.items()
            }

        return step

    steps = {key: distributed(*step) for key, step in model.steps(inputs).items()}
    return lambda step: steps[model.step_key(step)]()


def restore_encoder(encoder, source):
    """Loads the `encoder` weights of another run's checkpoint into `encoder`."""
    path = tf.train.latest_checkpoint(os.path.join(source, "checkpoints")) or source
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"No checkpoint to initialize from at {source}")
    status = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=ensure_built(encoder))).restore(path)
    status.expect_partial().assert_existing_objects_matched()
    print(f"Initialized the encoder from {path}")


def run_provenance(model_dir, recipe=None, data=(), start=None, num_steps=None, global_batch_size=None):
    """What an export of this run records of where its weights came from (`export.model_card` renders it):
    the recipe (`{"gin_files", "gin_params", "smoke"}` of the command line), the full gin config, the data (the
    input's `corpora`, by name and examples), the start checkpoint (`train.pretrained` or `init_from`, by name),
    the run's length and batch. No path of this machine: paths inside the working directory stay relative to it,
    others become names (`tf_msemb.provenance`), so a copied export's card holds nothing that fails elsewhere."""
    recipe = recipe or {}
    return {"kind": "training", "model_dir": portable_path(model_dir),
            "gin_files": [portable_path(f) for f in recipe.get("gin_files", [])],
            "gin_params": [portable_text(param) for param in recipe.get("gin_params", [])],
            "smoke": bool(recipe.get("smoke")),
            "operative_config": os.path.join(model_dir, "operative_config.gin"),
            "data": [describe_file(path) for path in data],
            "start": describe_source(start) if start else None, "num_steps": num_steps,
            "global_batch_size": global_batch_size}


def _dev_results(model_dir, step=None):
    """The rows of `model_dir/eval_results.jsonl` up to `step` (all without one), one a step: a step evaluated
    again after resuming keeps its last row."""
    path = os.path.join(model_dir, "eval_results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        rows = {row["step"]: row for row in map(json.loads, f) if step is None or row["step"] <= step}
    return [rows[s] for s in sorted(rows)]


class Exporter:
    """Exports every model an objective names; every worker takes part (saving reads variables collectively).

    The main model (`"encoder"`) goes to `model_dir/export/<step>` and
    `export/final`, any other to `export/<name>/<step>` and `export/<name>/final`;
    only the chief's copies stay. Each export records `provenance`
    (`run_provenance`) with the run's dev figures up to its step (`best`:
    all so far, which show the later steps it beat).
    """

    def __init__(self, model, model_dir, chief, provenance=None):
        self.model, self.root, self.chief = model, os.path.join(model_dir, "export"), chief
        self.model_dir = model_dir
        self.provenance = provenance or run_provenance(model_dir)
        self.info = portable_value({"class": type(model).__name__, **model.options})  # options may name files
        if model.matryoshka:
            self.info["matryoshka"] = describe_widths(model.matryoshka)
        self.last_step = None  # the step of the latest `<step>` export, the same on every worker

    def __call__(self, step, final=False, selection=None):
        """Exports this step as `<step>` (and `final`), or with a `selection` as `best`; returns the main path."""
        paths = {}
        provenance = self.provenance | {
            "dev_results": _dev_results(self.model_dir, None if selection else step) if self.chief else []}
        if not (self.chief and os.path.exists(provenance["operative_config"])):
            provenance["operative_config"] = None
        for name, (tokenizer, encoder) in self.model.exports().items():
            root = self.root if self.chief else tempfile.mkdtemp(prefix="tf_msemb_export_")
            export_dir = root if name == "encoder" else os.path.join(root, name)
            if selection:
                path = export_version(tokenizer, encoder, export_dir, step, self.info, version="best",
                                      selection=selection, provenance=provenance)
            else:
                path = export_version(tokenizer, encoder, export_dir, step, self.info, final=final,
                                      provenance=provenance)
            paths[name] = os.path.join(export_dir, "final") if final else path
            if not self.chief:
                shutil.rmtree(root, ignore_errors=True)
        if not selection:
            self.last_step = step
        if self.chief:
            others = "".join(f"; {name}: {path}" for name, path in paths.items() if name != "encoder")
            print(f"Exported SavedModel: {paths['encoder']}{others}", flush=True)
        return paths["encoder"]

    def copy_as_best(self, step, selection):
        """Copies this step's exports to `best`, naming the `selection`: the weights are those just saved."""
        if self.last_step != step:
            raise ValueError(f"Step {step} has no export to copy; the latest is {self.last_step}.")
        if not self.chief:
            return
        for name in self.model.exports():
            export_dir = self.root if name == "encoder" else os.path.join(self.root, name)
            path = copy_version(os.path.join(export_dir, str(step)), export_dir, "best", selection)
            if name == "encoder":
                print(f"Exported SavedModel: {path}", flush=True)


class DevSteps:
    """One evaluation of the run: metrics, their reports, and the best checkpoint; the best export at the end.

    Every worker computes the metrics and takes part in saving; only the
    chief writes `eval_results.jsonl` and keeps the saved files.
    """

    def __init__(self, dev, model, exporter, checkpoint, log, model_dir, chief):
        self.dev, self.model, self.exporter, self.checkpoint = dev, model, exporter, checkpoint
        self.log, self.model_dir, self.chief = log, model_dir, chief
        self.count, self.seconds = 0, 0.0

    def __call__(self, step):
        """Evaluates at `step`; returns whether early stopping says to stop."""
        start = time.perf_counter()
        tokenizer, encoder = self.model.exports()["encoder"]
        results = self.dev.metrics(tokenizer, encoder)
        best = self.dev.record(step, results)
        if self.chief:
            write_results(self.model_dir, step, results)
        if best:
            directory = os.path.join(self.model_dir, "best") if self.chief else tempfile.mkdtemp()
            self.checkpoint.write(os.path.join(directory, "ckpt"))
            if not self.chief:
                shutil.rmtree(directory, ignore_errors=True)
        seconds = time.perf_counter() - start
        self.count, self.seconds = self.count + 1, self.seconds + seconds
        self.log.write_eval(step, results, self.dev.selection if self.dev.best_metric else None, seconds)
        if self.dev.exhausted:
            print(f"Early stopping at step {step}: no better {self.dev.best_metric} in {self.dev.patience} "
                  "evaluations.", flush=True)
        return self.dev.exhausted

    def export_best(self, step):
        """Writes `export/best` for the best step unless it holds it already; the weights in use stay.

        At `step` itself the weights are those in use and, once exported,
        `export/<step>` is copied rather than saved again; otherwise every worker
        saves the model's state (its layers and its optimizer: all the
        checkpoint keeps under `model`) to a scratch checkpoint, reads that
        part of `model_dir/best/ckpt` (storage every worker reads, as for
        resuming), exports, and reads its own state back.
        """
        best_step = int(self.dev.best_step.numpy())
        if best_step < 0 or int(self.dev.exported_step.numpy()) == best_step:
            return
        start = time.perf_counter()
        if best_step == step and self.exporter.last_step == step:
            self.exporter.copy_as_best(step, self.dev.selection)
        elif best_step == step:
            self.exporter(step, selection=self.dev.selection)
        else:
            scratch = tempfile.mkdtemp(prefix="tf_msemb_state_")
            model_state = tf.train.Checkpoint(model=self.model)
            current = model_state.write(os.path.join(scratch, "ckpt"))
            model_state.read(os.path.join(self.model_dir, "best", "ckpt")).expect_partial()
            self.exporter(best_step, selection=self.dev.selection)
            model_state.read(current).assert_consumed()
            shutil.rmtree(scratch, ignore_errors=True)
        self.dev.exported_step.assign(best_step)
        self.seconds += time.perf_counter() - start  # part of what evaluation costs the run


def build_objective(objective, run, encoder, pretrained, init_from, model_dir, precision, frozen_embeddings=False):
    """The compiled objective around a fresh or pretrained student (its token table frozen with
    `frozen_embeddings`), and the student's tokenizer."""
    tokenizer = run.tokenizer
    if pretrained is not None:
        tokenizer, student = load_pretrained(pretrained)
    else:
        student = encoder(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length)
    if init_from and not tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")):
        restore_encoder(student, init_from)
    if frozen_embeddings:
        for table in freeze_token_embeddings(student):
            rows, width = table.embeddings.shape
            print(f"Token embeddings frozen: {table.path} ({rows:,} x {width})", flush=True)
    model = objective(encoder=student, run=dataclasses.replace(run, tokenizer=tokenizer))
    model.build()
    optimizer = make_optimizer(total_steps=run.total_steps, global_batch_size=run.global_batch_size)
    model.compile(optimizer=wrap_optimizer(optimizer, precision))
    model.optimizer.build(model.trainable_variables)
    return model, tokenizer


def _resume(checkpoints, inputs):
    """Restores the latest checkpoint of the run, if any, and says so."""
    resumed = checkpoints.restore()
    if resumed:
        print(f"Resumed from {resumed}", flush=True)
        if not inputs.checkpointable:
            print("warning: this strategy's input position is not checkpointed; data restarts.", flush=True)


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """When the loop stops, logs, checkpoints and exports (steps; wall minutes for the budget)."""

    num_steps: int
    log_every: int
    checkpoint_every: int
    export_every: int = None
    max_train_minutes: float = None
    eval_every: int = None


def train_loop(step_fn, model, inputs, checkpoints, exporter, log, settings, step, evaluate=None):
    """Steps from `step` until `num_steps`, the time budget or early stopping; logs, checkpoints, exports and
    evaluates (`evaluate(step)`, which says whether to stop) on the way. Returns the last step taken.
    """
    minutes = settings.max_train_minutes
    deadline = time.monotonic() + 60 * minutes if minutes else None
    while step < settings.num_steps and not (evaluate and evaluate.dev.exhausted):
        if deadline and time.monotonic() > deadline:
            print(f"Time budget of {minutes} minutes reached at step {step}.", flush=True)
            break
        try:
            logs = step_fn(step)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise CorpusError(explain_data_error(e, inputs.source_files, step + 1)) from None
        step += 1
        loss = float(logs["loss"])
        if not math.isfinite(loss):
            last = checkpoints.latest or "none (no checkpoint written yet)"
            raise NonFiniteLossError(
                f"Loss became {loss} at step {step}; the last good checkpoint is {last}. Lower the learning "
                "rate or check the data, then run the same command again to resume from it."
            )
        if step % settings.log_every == 0 or step == settings.num_steps:
            values = {name: float(value) for name, value in logs.items()}
            log.write(step, values | {"lr": float(model.optimizer.learning_rate)})
            for metric in model.metrics:
                metric.reset_state()
        if step < settings.num_steps and settings.export_every and step % settings.export_every == 0:
            exporter(step)
        # Evaluating before the checkpoint of the same step saves the selection with this step's figures: a run
        # resumed from it remembers them.
        stop = evaluate and settings.eval_every and step % settings.eval_every == 0 and evaluate(step)
        if step < settings.num_steps and step % settings.checkpoint_every == 0:
            checkpoints.save(step)
        if stop:
            break
    return step


@gin.configurable(denylist=["model_dir"])
def train(model_dir, objective=gin.REQUIRED, tokenizer=None, encoder=SentenceEncoder, pretrained=None,
          global_batch_size=64, per_replica_batch_size=None, num_steps=1000, strategy="default", log_every=50,
          checkpoint_every=1000, keep_checkpoints=3, export_every=None, seed=0, max_train_minutes=None,
          dataset_fn=make_distributed_dataset, init_from=None, precision="float32", jit_compile=False,
          packed_training=True, evaluators=(), eval_every=None, best_metric=None, best_mode="max", patience=None,
          gradient_cache_chunk=None, matryoshka_widths=None, matryoshka_weights=None, frozen_embeddings=False,
          recipe=None):
    """Trains `objective(encoder=..., run=...)` and exports what it names (`Objective.exports`).

    `model_dir` gets checkpoints (an existing one is resumed exactly: weights,
    optimizer, objective state, input position), TensorBoard logs,
    `operative_config.gin` and `export/`. Either `tokenizer` (with `encoder`,
    a class called with its vocabulary size and maximum length) or
    `pretrained` (a `load_pretrained` name or path) gives the student. The
    batch is `global_batch_size` or `per_replica_batch_size` x replicas;
    `strategy` is a `make_strategy` name or a built strategy (the CLI builds
    it first, as multi-worker training requires). `export_every` adds
    `export/<step>` versions; `max_train_minutes` stops early (checkpoint
    and export as at the end); `dataset_fn` builds the input
    (`@make_distributed_labeled_dataset` for STS/NLI pairs); `init_from` is a
    run whose encoder weights start this one (seed 000 stage 2, ignored when
    resuming); `precision` is float32, mixed_bfloat16 or mixed_float16;
    `jit_compile` compiles each replica's step with XLA. `packed_training`
    runs the encoders' training forward on the real tokens only
    (`Embedder.packed_training`: the padded forward's losses and gradients
    within 1e-5, less work per padded batch); XLA steps and TPUs train
    padded (static shapes). `evaluators`
    (`evaluation.evaluator.Evaluator`s) run every `eval_every` steps and at
    the end; `best_metric` (with `best_mode` max or min) keeps `export/best`
    and `best/ckpt`, and `patience` stops after that many evaluations without
    improvement (see `training.dev_evaluation`). `gradient_cache_chunk`
    (rows) trains an objective with in-batch negatives by gradient caching
    (`objectives.gradient_cache`): the same gradient as the plain step, in
    the memory of one chunk's encoder activations, so the batch can exceed
    what fits at once. `matryoshka_widths` (e.g. `[384, 256, 128, 64]`, with
    `matryoshka_weights`, default 1 each) trains nested vectors: the loss of
    every width's prefix, re-normalized (`losses.matryoshka`), so exports can
    be cut to any of them (`inference_module.output_dim`). `frozen_embeddings` freezes the student's token
    embedding table (`models.encoder.freeze_token_embeddings`): no gradient,
    moments or update for its rows, which are most of a large-vocabulary
    model's parameters (XLM-R's 250K rows: 96M of multilingual-e5-small's
    118M). `recipe` (`{"gin_files", "gin_params"}`, the command
    line's, and `smoke`) goes into every export's provenance and model card.
    Returns `{"export", "steps" (run now), "pairs_per_second", "seconds",
    "eval_seconds"}`, the rate measured after the first log line so start-up
    and tracing do not count; evaluation's share of the run is printed.
    """
    started = time.perf_counter()
    if precision == "mixed_bfloat16":  # where oneDNN gets bfloat16 matmuls and has no kernel, it aborts the process
        require([BFLOAT16_REQUIREMENT], "train.precision = 'mixed_bfloat16'")
    strategy = make_strategy(strategy) if isinstance(strategy, str) else strategy
    keras.utils.set_random_seed(seed)
    global_batch_size = per_replica_batch_size * strategy.num_replicas_in_sync if per_replica_batch_size \
        else global_batch_size
    os.makedirs(model_dir, exist_ok=True)
    if (pretrained is None) == (tokenizer is None):
        raise ValueError("Set exactly one of train.tokenizer (fresh encoder) and train.pretrained.")
    with strategy.scope(), precision_policy(precision):
        run = RunFacts(tokenizer, num_steps, global_batch_size, seed, gradient_cache_chunk,
                       tuple(matryoshka_widths) if matryoshka_widths else None,
                       tuple(matryoshka_weights) if matryoshka_weights else None)
        model, tokenizer = build_objective(objective, run, encoder, pretrained, init_from, model_dir, precision,
                                           frozen_embeddings)
    obstacle = model.xla_obstacle() if jit_compile else None
    if obstacle:
        raise ValueError(f"{obstacle}; unset train.jit_compile.")
    set_packed_training(model, packed_training)
    inputs = model.make_input(dataset_fn, strategy, global_batch_size, tokenizer=tokenizer, seed=seed)
    # Dropout's random-seed states are Keras variables that the layers do not
    # expose to TensorFlow checkpoints; listing them makes resumed runs exact.
    seed_states = [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]
    dev = DevEvaluation(evaluators, best_metric, best_mode, patience)
    state = tf.train.Checkpoint(model=model, optimizer=model.optimizer, data=inputs.iterators, seeds=seed_states,
                                evaluation=dev.state())
    checkpoints = RunCheckpoints(state, model_dir, strategy, keep_checkpoints)
    _resume(checkpoints, inputs)
    decorrelate_dropout(strategy, seed_states)
    chief = is_chief(strategy)
    if chief:
        with open(os.path.join(model_dir, "operative_config.gin"), "w", encoding="utf-8") as f:
            f.write(gin.operative_config_str())
    first_step = int(model.optimizer.iterations.numpy())
    settings = LoopSettings(num_steps, log_every, checkpoint_every, export_every, max_train_minutes, eval_every)
    exporter = Exporter(model, model_dir, chief, run_provenance(model_dir, recipe, getattr(inputs, "corpora", []),
                                                                pretrained or init_from, num_steps, global_batch_size))
    with RunLog(model_dir if chief else None, ProgressLine(num_steps, global_batch_size, first_step)) as log:
        evaluate = DevSteps(dev, model, exporter, state, log, model_dir, chief) if dev.evaluators else None
        step = train_loop(_make_step_function(model, strategy, inputs, jit_compile), model, inputs, checkpoints,
                          exporter, log, settings, first_step, evaluate)
        if evaluate and int(dev.last_step.numpy()) != step:
            evaluate(step)
        final = exporter(step, final=True)
        if evaluate:
            evaluate.export_best(step)
    checkpoints.save(step)
    checkpoints.close()
    seconds = time.perf_counter() - started
    if evaluate:
        print(f"Evaluation: {evaluate.count} evaluations took {evaluate.seconds:.1f} s of the run's {seconds:.1f} s "
              f"({100 * evaluate.seconds / seconds:.1f} %).", flush=True)
    return {"export": final, "steps": step - first_step, "pairs_per_second": log.steady_rate,
            "eval_seconds": evaluate.seconds if evaluate else 0.0, "seconds": seconds}
