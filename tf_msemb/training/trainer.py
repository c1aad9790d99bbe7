"""The gin-configured train loop: strategy, data, objective, checkpoints, export."""

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
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.saved_model import export_version
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.training.checkpointing import RunCheckpoints
from tf_msemb.training.errors import NonFiniteLossError
from tf_msemb.training.errors import explain_data_error
from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.models.precision import precision_policy
from tf_msemb.models.precision import wrap_optimizer
from tf_msemb.training.progress import ProgressLine
from tf_msemb.training.strategy import is_chief
from tf_msemb.training.strategy import make_strategy


def _make_step_function(model, strategy, inputs, jit_compile):
    """`step()` -> the replica-averaged logs of one `train_step` on the next batch.

    With `jit_compile`, XLA compiles each replica's step (the batch is read
    outside the compiled part: tf.data and string ops cannot be compiled).
    """
    replica_step = tf.function(model.train_step, jit_compile=True) if jit_compile else model.train_step

    @tf.function
    def step():
        per_replica = strategy.run(replica_step, args=(inputs.next_batch(),))
        return {
            name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
            for name, value in per_replica.items()
        }

    return step


def restore_encoder(encoder, source):
    """Loads the `encoder` weights of another run's checkpoint into `encoder`."""
    path = tf.train.latest_checkpoint(os.path.join(source, "checkpoints")) or source
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"No checkpoint to initialize from at {source}")
    status = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=ensure_built(encoder))).restore(path)
    status.expect_partial().assert_existing_objects_matched()
    print(f"Initialized the encoder from {path}")


@gin.configurable(denylist=["model_dir"])
def train(
    model_dir,
    objective=gin.REQUIRED,
    tokenizer=None,
    encoder=SentenceEncoder,
    pretrained=None,
    global_batch_size=64,
    per_replica_batch_size=None,
    num_steps=1000,
    strategy="default",
    log_every=50,
    checkpoint_every=1000,
    keep_checkpoints=3,
    export_every=None,
    seed=0,
    max_train_minutes=None,
    dataset_fn=make_distributed_dataset,
    init_from=None,
    precision="float32",
    jit_compile=False,
):
    """Trains `objective(encoder=...)` and exports the encoder.

    Args:
        model_dir: checkpoints, TensorBoard logs, `operative_config.gin` and
            `export/` go here; an existing checkpoint is resumed exactly
            (weights, optimizer, objective state, input position).
        objective: the objective class (`@TranslationRanking`), called with
            `encoder=` inside the strategy scope.
        tokenizer: a tokenizer layer (`@SentencePieceTokenizer()`), for a
            fresh encoder.
        encoder: the encoder class, called with the tokenizer's vocabulary
            size and maximum length.
        pretrained: instead of `tokenizer` and `encoder`, start from a
            pretrained model (a `load_pretrained` name or path) and its tokenizer.
        global_batch_size: pairs per step over all replicas.
        per_replica_batch_size: instead, pairs per replica per step (the
            global batch then grows with the replica count).
        num_steps: optimizer steps in total.
        strategy: a name for `make_strategy` (its other arguments in gin),
            or a `tf.distribute.Strategy` (the CLI builds it before anything
            else runs, as multi-worker training requires).
        log_every, checkpoint_every: in steps.
        keep_checkpoints: how many recent checkpoints to keep.
        export_every: also export `export/<step>` every this many steps
            (the last step is always exported, as `export/<step>` and
            `export/final`).
        seed: seeds weights, dropout and data order.
        max_train_minutes: stop early (checkpoint and export as at the end)
            once this much wall time has gone into the loop.
        dataset_fn: builds the input (`ReplicaInput`): translation pairs by
            default, `@make_distributed_labeled_dataset` for STS/NLI pairs.
        init_from: a previous run's `model_dir` (or checkpoint path) whose
            encoder weights initialize this run's encoder (seed 000 stage 2
            starts from stage 1). Ignored when resuming.
        precision: `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`
            (with dynamic loss scaling); exports keep float32 inputs/outputs.
        jit_compile: compile each replica's train step with XLA.
    Returns:
        `{"export": path, "steps": steps run now, "pairs_per_second": ...}`;
        the rate is measured after the first log line, so start-up and
        tracing do not count.
    """
    if isinstance(strategy, str):
        strategy = make_strategy(strategy)
    keras.utils.set_random_seed(seed)
    if per_replica_batch_size:
        global_batch_size = per_replica_batch_size * strategy.num_replicas_in_sync
    os.makedirs(model_dir, exist_ok=True)
    if (pretrained is None) == (tokenizer is None):
        raise ValueError("Set exactly one of train.tokenizer (fresh encoder) and train.pretrained.")
    with strategy.scope(), precision_policy(precision):
        if pretrained is not None:
            tokenizer, student = load_pretrained(pretrained)
        else:
            student = encoder(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length)
        if init_from and not tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")):
            restore_encoder(student, init_from)
        model = objective(encoder=student)
        model.build()
        optimizer = make_optimizer(total_steps=num_steps, global_batch_size=global_batch_size)
        model.compile(optimizer=wrap_optimizer(optimizer, precision))
        model.optimizer.build(model.trainable_variables)
    inputs = dataset_fn(strategy, global_batch_size, tokenizer=tokenizer, seed=seed, **model.data_options())
    # Dropout's random-seed states are Keras variables that the layers do not
    # expose to TensorFlow checkpoints; listing them makes resumed runs exact.
    seed_states = [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]
    checkpoints = RunCheckpoints(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer, data=inputs.iterators, seeds=seed_states),
        model_dir, strategy, keep_checkpoints,
    )
    resumed = checkpoints.restore()
    if resumed:
        print(f"Resumed from {resumed}", flush=True)
        if not inputs.checkpointable:
            print("warning: this strategy's input position is not checkpointed; data restarts.", flush=True)
    chief = is_chief(strategy)
    if chief:
        with open(os.path.join(model_dir, "operative_config.gin"), "w", encoding="utf-8") as f:
            f.write(gin.operative_config_str())
    objective_info = {"class": type(model).__name__, **model.options}

    def export(step, final=False):
        # Every worker writes (saving reads variables collectively); only the chief's copy stays.
        export_dir = os.path.join(model_dir, "export") if chief else tempfile.mkdtemp(prefix="tf_msemb_export_")
        path = export_version(tokenizer, model.encoder, export_dir, step, objective_info, final=final)
        if not chief:
            shutil.rmtree(export_dir, ignore_errors=True)
        return os.path.join(os.path.dirname(path), "final") if final else path

    step_fn = _make_step_function(model, strategy, inputs, jit_compile)
    writer = tf.summary.create_noop_writer()
    if chief:
        writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
    step = int(model.optimizer.iterations.numpy())
    progress = ProgressLine(num_steps, global_batch_size, start_step=step)
    deadline = time.monotonic() + 60 * max_train_minutes if max_train_minutes else None
    first_step, steady_since, steady_step = step, None, step
    while step < num_steps:
        if deadline and time.monotonic() > deadline:
            print(f"Time budget of {max_train_minutes} minutes reached at step {step}.", flush=True)
            break
        try:
            logs = step_fn()
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
        if step % log_every == 0 or step == num_steps:
            logs = {name: float(value) for name, value in logs.items()}
            logs["lr"] = float(model.optimizer.learning_rate)
            steps_per_second = progress.rate(step)
            print(progress.format(step, logs, steps_per_second), flush=True)
            with writer.as_default(step=step):
                for name, value in logs.items():
                    tf.summary.scalar(name, value)
                tf.summary.scalar("pairs_per_second", steps_per_second * global_batch_size)
            for metric in model.metrics:
                metric.reset_state()
            if steady_since is None:
                steady_since, steady_step = time.perf_counter(), step
        if step % checkpoint_every == 0 and step < num_steps:
            checkpoints.save(step)
        if export_every and step % export_every == 0 and step < num_steps:
            path = export(step)
            if chief:
                print(f"Exported SavedModel: {path}", flush=True)
    steady_rate = 0.0
    if steady_since is not None:
        steady_rate = (step - steady_step) * global_batch_size / (time.perf_counter() - steady_since)
    checkpoints.save(step)
    checkpoints.close()
    writer.close()
    path = export(step, final=True)
    if chief:
        print(f"Exported SavedModel: {path} (and {os.path.join(os.path.dirname(path), str(step))})", flush=True)
    target_encoder = getattr(model, "target_encoder", model.encoder)
    if target_encoder is not model.encoder and chief:
        target = export_saved_model(tokenizer, target_encoder, os.path.join(model_dir, "export", "final_target"),
                                    step=step, objective=objective_info)
        print(f"Exported the target-side encoder: {target}")
    return {"export": path, "steps": step - first_step, "pairs_per_second": steady_rate}
