"""Checkpoints that survive a killed run: resume from the newest readable one."""

import glob
import os
import re
import shutil

import tensorflow as tf
from absl import logging

from tf_msemb.training.strategy import is_chief


class CheckpointError(RuntimeError):
    """A run directory holds checkpoints but none of them can be restored."""


def _steps_on_disk(directory):
    """Checkpoint numbers whose `.index` file exists, newest first (independent of the `checkpoint` state file)."""
    numbers = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.index")):
        match = re.fullmatch(r"ckpt-(\d+)\.index", os.path.basename(path))
        if match:
            numbers.append(int(match.group(1)))
    return sorted(numbers, reverse=True)


class RunCheckpoints:
    """Saves and restores one training run's state under `model_dir/checkpoints`.

    Under multi-worker training every worker must take part in saving; only
    the chief writes to `model_dir`, the others to a scratch directory that
    is removed when the run ends.

    Args:
        checkpoint: a `tf.train.Checkpoint` over everything to resume.
        model_dir: the run's directory.
        strategy: the run's strategy (decides who is chief).
        keep: how many recent checkpoints the chief keeps.
    """

    def __init__(self, checkpoint, model_dir, strategy, keep):
        self.checkpoint = checkpoint
        self.directory = os.path.join(model_dir, "checkpoints")
        self.chief = is_chief(strategy)
        write_dir = self.directory
        if not self.chief:
            write_dir = os.path.join(model_dir, f"worker-{strategy.cluster_resolver.task_id}-scratch")
        self.manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=keep)

    def restore(self):
        """Restores the newest checkpoint that reads back whole; returns its path (None for a fresh run).

        A corrupt or partial newest checkpoint (a run killed while writing,
        a damaged disk) is skipped with a warning for the one before it;
        when none can be restored the run stops rather than start over.
        """
        steps = _steps_on_disk(self.directory)
        for number in steps:
            path = os.path.join(self.directory, f"ckpt-{number}")
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
                return path
            except (tf.errors.OpError, ValueError, AssertionError, IndexError, KeyError) as e:
                reason = " ".join(str(e).split())[:200]
                message = f"Checkpoint {path} cannot be restored ({reason}); falling back to the previous one."
                logging.warning(message)
                print(f"warning: {message}", flush=True)
        if steps:
            raise CheckpointError(f"No checkpoint in {self.directory} can be restored; move the directory away "
                                  "to start the run over.")
        return None

    @property
    def latest(self):
        """Path of the newest checkpoint written (or found) in the run's directory."""
        steps = _steps_on_disk(self.directory)
        return os.path.join(self.directory, f"ckpt-{steps[0]}") if steps else None

    def save(self, step):
        self.manager.save(checkpoint_number=step)

    def close(self):
        if not self.chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
