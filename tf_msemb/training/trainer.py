"""The gin-configured train loop: strategy, data, objective, checkpoints, export."""

import os
import time

import gin
import keras
import tensorflow as tf

from tf_msemb.data.pipeline import make_distributed_dataset
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.training.progress import ProgressLine
from tf_msemb.training.strategy import make_strategy


def _make_step_function(model, strategy):
    @tf.function
    def step(iterator):
        per_replica = strategy.run(model.train_step, args=(next(iterator),))
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
    num_steps=1000,
    strategy="default",
    log_every=50,
    checkpoint_every=1000,
    keep_checkpoints=3,
    seed=0,
    max_train_minutes=None,
    dataset_fn=make_distributed_dataset,
    init_from=None,
):
    """Trains `objective(encoder=...)` and exports the encoder.

    Args:
        model_dir: checkpoints, TensorBoard logs, `operative_config.gin` and
            `export/final` go here; an existing checkpoint is resumed.
        objective: the objective class (`@TranslationRanking`), called with
            `encoder=` inside the strategy scope.
        tokenizer: a tokenizer layer (`@SentencePieceTokenizer()`), for a
            fresh encoder.
        encoder: the encoder class, called with the tokenizer's vocabulary
            size and maximum length.
        pretrained: instead of `tokenizer` and `encoder`, start from a
            pretrained model (a `load_pretrained` name or path) and its tokenizer.
        global_batch_size: pairs per step over all replicas.
        num_steps: optimizer steps in total.
        strategy: a name for `make_strategy`.
        log_every, checkpoint_every: in steps.
        keep_checkpoints: how many recent checkpoints to keep.
        seed: seeds weights, dropout and data order.
        max_train_minutes: stop early (checkpoint and export as at the end)
            once this much wall time has gone into the loop.
        dataset_fn: builds the distributed input: translation pairs by
            default, `@make_distributed_labeled_dataset` for STS/NLI pairs.
        init_from: a previous run's `model_dir` (or checkpoint path) whose
            encoder weights initialize this run's encoder (seed 000 stage 2
            starts from stage 1). Ignored when resuming.
    Returns:
        `{"export": path, "steps": steps run now, "pairs_per_second": ...}`;
        the rate is measured after the first log line, so start-up and
        tracing do not count.
    """
    keras.utils.set_random_seed(seed)
    strategy = make_strategy(strategy)
    os.makedirs(model_dir, exist_ok=True)
    if (pretrained is None) == (tokenizer is None):
        raise ValueError("Set exactly one of train.tokenizer (fresh encoder) and train.pretrained.")
    with strategy.scope():
        if pretrained is not None:
            tokenizer, student = load_pretrained(pretrained)
        else:
            student = encoder(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length)
        if init_from and not tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")):
            restore_encoder(student, init_from)
        model = objective(encoder=student)
        model.build()
        model.compile(optimizer=make_optimizer(total_steps=num_steps))
        model.optimizer.build(model.trainable_variables)
    dataset = dataset_fn(strategy, global_batch_size, tokenizer=tokenizer, seed=seed, **model.data_options())
    iterator = iter(dataset)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    manager = tf.train.CheckpointManager(
        checkpoint, os.path.join(model_dir, "checkpoints"), max_to_keep=keep_checkpoints
    )
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        print(f"Resumed from {manager.latest_checkpoint}")
    with open(os.path.join(model_dir, "operative_config.gin"), "w", encoding="utf-8") as f:
        f.write(gin.operative_config_str())

    step_fn = _make_step_function(model, strategy)
    writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
    step = int(model.optimizer.iterations.numpy())
    progress = ProgressLine(num_steps, global_batch_size, start_step=step)
    deadline = time.monotonic() + 60 * max_train_minutes if max_train_minutes else None
    first_step, steady_since, steady_step = step, None, step
    while step < num_steps:
        if deadline and time.monotonic() > deadline:
            print(f"Time budget of {max_train_minutes} minutes reached at step {step}.", flush=True)
            break
        logs = step_fn(iterator)
        step += 1
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
            manager.save(checkpoint_number=step)
    steady_rate = 0.0
    if steady_since is not None:
        steady_rate = (step - steady_step) * global_batch_size / (time.perf_counter() - steady_since)
    manager.save(checkpoint_number=step)
    writer.close()
    path = export_saved_model(tokenizer, model.encoder, os.path.join(model_dir, "export", "final"))
    print(f"Exported SavedModel: {path}")
    target_encoder = getattr(model, "target_encoder", model.encoder)
    if target_encoder is not model.encoder:
        target = export_saved_model(tokenizer, target_encoder, os.path.join(model_dir, "export", "final_target"))
        print(f"Exported the target-side encoder: {target}")
    return {"export": path, "steps": step - first_step, "pairs_per_second": steady_rate}
