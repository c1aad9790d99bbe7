"""Exact resume: a run killed with SIGKILL and started again with the same command
ends with the same weights and state as a run that was never interrupted.

Tolerance: 1e-6 absolute on every saved tensor. On this CPU the two runs are
bit-identical (the difference is 0): checkpoints hold the weights, optimizer
slots and step, the objective's state (EMA teacher, momentum encoders,
queues and pointer; the tau schedule follows the restored step), dropout's
seed states and the input pipelines' positions (shuffle buffers included).
On GPUs, non-deterministic kernels can break bit equality unless
`TF_DETERMINISTIC_OPS=1` is set.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # five training runs through the command line, about 3 minutes

STEPS = 16
OBJECTIVES = {
    "momentum_contrast": ["train.objective = @DualMomentumContrast", "DualMomentumContrast.queue_size = 48",
                          "DualMomentumContrast.in_batch_negatives = True", "DualMomentumContrast.momentum = 0.9"],
    "ema_teacher": ["train.objective = @EMATeacherDistillation",
                    "EMATeacherDistillation.tau_base = 0.9"],
    # A cached step's dropout masks follow (seed, step, tower, chunk), not the generators' running states.
    "gradient_cache": ["train.objective = @TranslationRanking", "train.gradient_cache_chunk = 4",
                       "SentenceEncoder.dropout = 0.2"],
}
# A saved tensor of each objective's own state (the gradient cache has none beyond the weights and seeds).
STATE = {"momentum_contrast": "queue_x", "ema_teacher": "teacher", "gradient_cache": "seeds/"}


def _command(model_dir, objective, num_steps=STEPS):
    bindings = [f"train.num_steps = {num_steps}", "train.checkpoint_every = 4", "train.log_every = 4",
                *OBJECTIVES[objective]]
    return ["-m", "tf_msemb.train", f"--gin_file={REPO}/configs/quickstart.gin", f"--model_dir={model_dir}",
            *[f"--gin_param={b}" for b in bindings]]


def _saved_tensors(path):
    reader = tf.train.load_checkpoint(path)
    dtypes = reader.get_variable_to_dtype_map()
    # The input pipelines' state is an opaque variant; its effect shows in every weight.
    return {name: reader.get_tensor(name) for name, dtype in dtypes.items() if dtype not in (tf.variant, tf.string)}


def _wait_for(path, process, timeout=300):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert process.poll() is None, "training ended before the checkpoint to kill at appeared"
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.1)


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_sigkill_and_rerun_equals_uninterrupted_run(quickstart_run, tmp_path, objective):
    work, _ = quickstart_run
    run(_command(tmp_path / "whole", objective), work)

    killed = subprocess.Popen([sys.executable, *_command(tmp_path / "killed", objective)], cwd=work,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(tmp_path / "killed" / "checkpoints" / "ckpt-8.index", killed)
    killed.kill()  # SIGKILL: no chance to save or clean up
    killed.wait()
    assert not (tmp_path / "killed" / "checkpoints" / f"ckpt-{STEPS}.index").exists()
    output = run(_command(tmp_path / "killed", objective), work)
    assert "Resumed from" in output and f"step {STEPS}/{STEPS}" in output
    assert "step 4/" not in output  # continued, not started over

    whole = _saved_tensors(str(tmp_path / "whole" / "checkpoints" / f"ckpt-{STEPS}"))
    resumed = _saved_tensors(str(tmp_path / "killed" / "checkpoints" / f"ckpt-{STEPS}"))
    assert whole.keys() == resumed.keys()
    assert any(STATE[objective] in name for name in whole)
    for name in whole:
        np.testing.assert_allclose(resumed[name], whole[name], atol=1e-6, rtol=0, err_msg=name)


def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(quickstart_run, tmp_path):
    work, _ = quickstart_run
    run(_command(tmp_path / "run", "ema_teacher", num_steps=12), work)
    checkpoints = tmp_path / "run" / "checkpoints"
    data = next(checkpoints.glob("ckpt-12.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])  # a write cut short

    result = subprocess.run([sys.executable, *_command(tmp_path / "run", "ema_teacher", num_steps=14)], cwd=work,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"warning: Checkpoint {checkpoints / 'ckpt-12'} cannot be restored" in result.stdout
    assert f"Resumed from {checkpoints / 'ckpt-8'}" in result.stdout
    assert "step 12/14" in result.stdout and "step 14/14" in result.stdout
