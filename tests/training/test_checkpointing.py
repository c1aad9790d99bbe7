"""RunCheckpoints on a single variable: pruning, finding the newest, falling back past corrupt ones."""

import os
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.training.checkpointing import CheckpointError
from tf_msemb.training.checkpointing import RunCheckpoints


def checkpoints(model_dir, keep=3, strategy=None):
    variable = tf.Variable(np.zeros(4, np.float32))
    run = RunCheckpoints(tf.train.Checkpoint(v=variable), str(model_dir), strategy or tf.distribute.get_strategy(),
                         keep)
    return run, variable


def save_steps(run, variable, steps):
    for step in steps:
        variable.assign(np.full(4, step, np.float32))
        run.save(step)


def files(directory, suffix=".index"):
    return sorted(name for name in os.listdir(directory) if name.endswith(suffix))


def truncate_data(path):
    data = next(p for p in path.parent.iterdir() if p.name.startswith(path.name + ".data-"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])


def test_a_fresh_run_restores_nothing(tmp_path):
    run, _ = checkpoints(tmp_path)
    assert run.restore() is None and run.latest is None


def test_keeps_the_newest_and_restores_it(tmp_path):
    run, variable = checkpoints(tmp_path, keep=2)
    save_steps(run, variable, [10, 20, 30])
    assert files(tmp_path / "checkpoints") == ["ckpt-20.index", "ckpt-30.index"]
    assert run.latest == str(tmp_path / "checkpoints" / "ckpt-30")

    fresh, restored = checkpoints(tmp_path, keep=2)
    assert fresh.restore() == str(tmp_path / "checkpoints" / "ckpt-30")
    np.testing.assert_array_equal(restored.numpy(), np.full(4, 30))


def test_the_newest_on_disk_wins_over_the_state_file(tmp_path):
    """A run killed after writing a checkpoint but before updating `checkpoint` resumes from the newest."""
    run, variable = checkpoints(tmp_path)
    save_steps(run, variable, [1, 2, 3])
    (tmp_path / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    fresh, restored = checkpoints(tmp_path)
    assert fresh.restore().endswith("ckpt-3")
    np.testing.assert_array_equal(restored.numpy(), np.full(4, 3))


def test_steps_are_ordered_as_numbers(tmp_path):
    run, variable = checkpoints(tmp_path)
    save_steps(run, variable, [9, 10])
    assert run.latest.endswith("ckpt-10")


def test_a_corrupt_newest_checkpoint_falls_back_to_the_one_before(tmp_path, capsys):
    run, variable = checkpoints(tmp_path)
    save_steps(run, variable, [1, 2, 3])
    truncate_data(tmp_path / "checkpoints" / "ckpt-3")
    fresh, restored = checkpoints(tmp_path)
    assert fresh.restore() == str(tmp_path / "checkpoints" / "ckpt-2")
    np.testing.assert_array_equal(restored.numpy(), np.full(4, 2))
    out = capsys.readouterr().out
    assert f"warning: Checkpoint {tmp_path / 'checkpoints' / 'ckpt-3'} cannot be restored" in out
    assert "ckpt-2 cannot" not in out


def test_no_restorable_checkpoint_stops_instead_of_starting_over(tmp_path):
    run, variable = checkpoints(tmp_path)
    save_steps(run, variable, [1, 2])
    for step in (1, 2):
        truncate_data(tmp_path / "checkpoints" / f"ckpt-{step}")
    fresh, _ = checkpoints(tmp_path)
    with pytest.raises(CheckpointError, match="No checkpoint in .* can be restored"):
        fresh.restore()


def test_a_non_chief_worker_writes_to_a_scratch_directory_it_removes(tmp_path):
    worker = SimpleNamespace(cluster_resolver=SimpleNamespace(task_type="worker", task_id=1))
    run, variable = checkpoints(tmp_path, strategy=worker)
    save_steps(run, variable, [1])
    scratch = tmp_path / "worker-1-scratch"
    assert files(scratch) == ["ckpt-1.index"]
    assert not (tmp_path / "checkpoints").exists()
    run.close()
    assert not scratch.exists()
