"""A one-line progress report for long training runs."""

import datetime
import time


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
