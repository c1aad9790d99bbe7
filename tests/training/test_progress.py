"""The progress line: throughput over the last window, pairs/s and the ETA."""

import pytest

from tf_msemb.training import progress
from tf_msemb.training.progress import ProgressLine


@pytest.fixture
def clock(monkeypatch):
    """A settable `time.perf_counter` for the progress module."""
    now = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    return now


def test_rate_counts_the_steps_since_the_previous_call(clock):
    line = ProgressLine(total_steps=100, global_batch_size=8, start_step=20)
    clock[0] += 5.0
    assert line.rate(30) == pytest.approx(2.0)  # a resumed run counts from its start step
    clock[0] += 2.0
    assert line.rate(50) == pytest.approx(10.0)  # the window restarts at each call


def test_format_gives_metrics_pairs_per_second_and_eta():
    line = ProgressLine(total_steps=400, global_batch_size=32)
    text = line.format(250, {"loss": 0.1734567, "accuracy": 0.96441, "lr": 0.000416666}, steps_per_second=2.5)
    assert text == "step 250/400 loss 0.1735 accuracy 0.9644 lr 0.0004167 pairs/s 80.0 ETA 0:01:00"


@pytest.mark.parametrize(
    "step,steps_per_second,eta",
    [(0, 1.0, "1:02:05"), (3720, 1.0, "0:00:05"), (3725, 1.0, "0:00:00"), (0, 0.001, "43 days, 2:43:20"),
     (3724, 3.0, "0:00:00"), (3722, 2.0, "0:00:02")],
)
def test_eta_is_the_remaining_steps_at_this_rate(step, steps_per_second, eta):
    text = ProgressLine(total_steps=3725, global_batch_size=1).format(step, {"loss": 1.0}, steps_per_second)
    assert text.endswith(f" ETA {eta}")


def test_a_stalled_window_does_not_divide_by_zero():
    text = ProgressLine(total_steps=10, global_batch_size=4).format(5, {"loss": 1.0}, steps_per_second=0.0)
    assert text.startswith("step 5/10 loss 1 pairs/s 0.0 ETA ")


def test_the_eval_line_gives_the_summary_metrics_the_best_and_the_time(capsys):
    results = {"retrieval/a / b/mean": 0.5, "retrieval/mean": 0.61234, "sts/spearman": 71.25}
    with progress.RunLog(None, ProgressLine(total_steps=10, global_batch_size=4)) as log:
        log.write_eval(200, results, {"metric": "retrieval/mean", "value": 0.7, "step": 100}, seconds=12.34)
    assert capsys.readouterr().out == ("eval step 200 retrieval/mean 0.6123 sts/spearman 71.25 "
                                       "| best retrieval/mean 0.7 at step 100 | 12.3 s\n")


def test_the_steady_rate_runs_from_the_first_report_to_the_last(clock, capsys):
    """Tracing before the first report and the final export after the last one do not count (bench_train's rate
    read 2.47 s per step for 1.83 s steps when a 25 s export counted)."""
    with progress.RunLog(None, ProgressLine(total_steps=30, global_batch_size=4)) as log:
        clock[0] += 60.0  # start-up and tracing
        log.write(10, {"loss": 1.0})
        clock[0] += 20.0
        log.write(30, {"loss": 0.5})
        clock[0] += 25.0  # the final export and checkpoint
        assert log.steady_rate == pytest.approx(20 * 4 / 20.0)
