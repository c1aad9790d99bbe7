"""What a long training run reports: a one-line progress report and TensorBoard scalars."""

import datetime
import os
import time

import tensorflow as tf


class ProgressLine:
    """Tracks throughput and prints `step, metrics, pairs/s, ETA`."""

    def __init__(self, total_steps, global_batch_size, start_step=0):
        self.total_steps = total_steps
        self.global_batch_size = global_batch_size
        self._last_step = start_step
        self._last_time = time.perf_counter()

    def rate(self, step):
        """Steps per second since the previous call; resets the window."""
        now = time.perf_counter()
        steps_per_second = (step - self._last_step) / max(now - self._last_time, 1e-9)
        self._last_step, self._last_time = step, now
        return steps_per_second

    def format(self, step, logs, steps_per_second):
        metrics = " ".join(f"{name} {value:.4g}" for name, value in logs.items())
        remaining = (self.total_steps - step) / max(steps_per_second, 1e-9)
        eta = datetime.timedelta(seconds=round(remaining))
        pairs = steps_per_second * self.global_batch_size
        return f"step {step}/{self.total_steps} {metrics} pairs/s {pairs:.1f} ETA {eta}"


class RunLog:
    """Where a run reports: the progress line on stdout and TensorBoard scalars in `model_dir/train`.

    Every worker prints; with `model_dir=None` (non-chief workers) no
    scalars are written. A context
    manager: the TensorBoard writer is closed on exit. `steady_rate` is the
    pairs per second from the first report to the last, so start-up and
    tracing do not count, nor the final export and checkpoint after it.

    Args:
        model_dir: the run's directory, or None.
        progress: the run's `ProgressLine`.
    """

    def __init__(self, model_dir, progress):
        self.progress = progress
        self.writer = tf.summary.create_noop_writer()
        if model_dir is not None:
            self.writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
        self._first_report = self._last_report = None  # (step, time)

    def write(self, step, logs):
        steps_per_second = self.progress.rate(step)
        print(self.progress.format(step, logs, steps_per_second), flush=True)
        with self.writer.as_default(step=step):
            for name, value in logs.items():
                tf.summary.scalar(name, value)
            tf.summary.scalar("pairs_per_second", steps_per_second * self.progress.global_batch_size)
        self._last_report = (step, time.perf_counter())
        self._first_report = self._first_report or self._last_report

    def write_eval(self, step, results, selection=None, seconds=None):
        """Prints the summary dev metrics (`task/metric`), the best so far and the time the evaluation took;
        every metric goes to TensorBoard."""
        summary = " ".join(f"{name} {value:.4g}" for name, value in results.items() if name.count("/") == 1)
        best = f" | best {selection['metric']} {selection['value']:.4g} at step {selection['step']}" if selection else ""
        took = f" | {seconds:.1f} s" if seconds is not None else ""
        print(f"eval step {step} {summary}{best}{took}", flush=True)
        with self.writer.as_default(step=step):
            for name, value in results.items():
                tf.summary.scalar(f"dev/{name}", value)

    @property
    def steady_rate(self):
        if self._first_report is None or self._last_report[0] == self._first_report[0]:
            return 0.0
        (first_step, since), (last_step, until) = self._first_report, self._last_report
        return (last_step - first_step) * self.progress.global_batch_size / (until - since)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.writer.close()
