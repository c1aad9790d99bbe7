"""The strategy factory, the learning-rate scaling rule, and multi-worker training on 127.0.0.1."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from conftest import REPO
from conftest import corpus_file
from tf_msemb.training.optimizers import make_optimizer
from tf_msemb.training.optimizers import scaled_learning_rate
from tf_msemb.training.strategy import StrategyError
from tf_msemb.training.strategy import is_chief
from tf_msemb.training.strategy import make_strategy


def test_default_and_one_device():
    assert make_strategy("default") is tf.distribute.get_strategy()
    one = make_strategy("one_device", devices=["/cpu:0"])
    assert isinstance(one, tf.distribute.OneDeviceStrategy) and one.num_replicas_in_sync == 1
    assert is_chief(one)


def test_unknown_strategy_is_named():
    with pytest.raises(StrategyError, match="Unknown strategy 'mirored'; choose one of default, one_device"):
        make_strategy("mirored")


@pytest.mark.parametrize("address, message", [
    (None, "No TPU found on this machine"),
    ("grpc://127.0.0.1:1", "No TPU found at 'grpc://127.0.0.1:1': nothing accepts connections there"),
])
def test_tpu_fails_fast_without_a_tpu(address, message):
    start = time.monotonic()
    with pytest.raises(StrategyError, match=message):
        make_strategy("tpu", tpu_address=address)
    assert time.monotonic() - start < 30


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(StrategyError, match="needs TF_CONFIG"):
        make_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(StrategyError, match="TF_CONFIG is not valid JSON"):
        make_strategy("multi_worker")


@pytest.mark.parametrize("rule, expected", [("none", 1e-3), ("linear", 4e-3), ("sqrt", 2e-3)])
def test_learning_rate_scaling_rules(rule, expected):
    assert scaled_learning_rate(1e-3, 256, rule, reference_batch_size=64) == pytest.approx(expected)
    optimizer = make_optimizer(total_steps=10, global_batch_size=256, learning_rate=1e-3, scaling=rule,
                               reference_batch_size=64, warmup_steps=0, decay="constant")
    assert float(optimizer.learning_rate) == pytest.approx(expected)


def test_learning_rate_scaling_needs_a_reference_batch():
    with pytest.raises(ValueError, match="needs make_optimizer.reference_batch_size"):
        scaled_learning_rate(1e-3, 256, "linear")
    with pytest.raises(ValueError, match="Unknown learning-rate scaling rule 'cubic'"):
        scaled_learning_rate(1e-3, 256, "cubic", 64)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_workers_on_localhost_train_together(tmp_path, spm_model, quickstart_records):
    """Two processes with TF_CONFIG form one MultiWorkerMirroredStrategy (ring collectives over gRPC).

    Both evaluate (the best export is a save every worker takes part in); only the chief writes: the two
    share one model_dir here, so a worker that wrote too would double the rows of eval_results.jsonl.
    """
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    heldout = (corpus_file("heldout", "en"), corpus_file("heldout", "de"))
    bindings = [
        f"SentencePieceTokenizer.model_file = '{spm_model}'", f"make_dataset.corpora = ['{quickstart_records}']",
        "SentenceEncoder.hidden_dim = 32", "SentenceEncoder.num_layers = 1", "SentenceEncoder.intermediate_dim = 64",
        "train.strategy = 'multi_worker'", "make_strategy.communication = 'ring'", "train.per_replica_batch_size = 8",
        "train.num_steps = 6", "train.log_every = 3", "train.checkpoint_every = 3",
        "train.evaluators = [@TranslationRetrieval()]", f"TranslationRetrieval.pairs = [{heldout!r}]",
        "train.eval_every = 3", "train.best_metric = 'retrieval/mean'",
    ]
    command = [sys.executable, "-m", "tf_msemb.train", "--gin_file=configs/quickstart.gin",
               f"--model_dir={tmp_path / 'run'}", *[f"--gin_param={b}" for b in bindings]]
    # Each worker writes to files, not pipes: a pipe nobody reads while the other worker is waited on can fill and
    # stall both (they share collectives). The limit: beside another test on 2 cores, four processes share them, and
    # a run of `make test-all` (2026-12-03) timed out at 300 s past step 3; a timeout shows both workers' last lines.
    limit_s = 600
    processes, logs = [], []
    for index in range(2):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(config))
        log = (tmp_path / f"worker{index}.out", tmp_path / f"worker{index}.err")
        with open(log[0], "w") as out, open(log[1], "w") as err:
            processes.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err))
        logs.append(log)
    outputs = []
    for process, (out, err) in zip(processes, logs):
        try:
            process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            tails = "\n".join(f"{path.name}: {path.read_text()[-1500:]}" for pair in logs for path in pair)
            pytest.fail(f"multi-worker training did not finish in {limit_s} s\n{tails}")
        assert process.returncode == 0, err.read_text()[-3000:]
        outputs.append(out.read_text())
    for index, stdout in enumerate(outputs):
        assert f"Worker worker:{index} of 2 replicas" in stdout
    # Both workers report the same all-reduced loss, global batch 2 x 8.
    losses = [[line.split(" loss ")[1].split()[0] for line in out.splitlines() if line.startswith("step ")]
              for out in outputs]
    assert len(losses[0]) == 2 and losses[0] == losses[1]
    evaluations = [[line.rsplit(" | ", 1)[0] for line in out.splitlines() if line.startswith("eval step ")]
                   for out in outputs]  # the figures, without the time each took
    assert len(evaluations[0]) == 2 and evaluations[0] == evaluations[1]
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval_results.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [3, 6]
    best = json.loads((tmp_path / "run" / "export" / "best" / "tf_msemb_export.json").read_text())
    assert best["selection"]["step"] == max(rows, key=lambda row: row["retrieval/mean"])["step"]
    metadata = json.loads((tmp_path / "run" / "export" / "final" / "tf_msemb_export.json").read_text())
    assert metadata["training_step"] == 6
    assert (tmp_path / "run" / "checkpoints" / "ckpt-6.index").exists()
    assert sorted(os.listdir(tmp_path / "run")) == ["best", "checkpoints", "eval_results.jsonl", "export",
                                                    "operative_config.gin", "train"]


def _dropout_masks(strategy, decorrelate):
    """Each replica's dropout of the same ones, from a fresh layer seeded alike."""
    import keras

    from tf_msemb.training.strategy import decorrelate_dropout

    with strategy.scope():
        keras.utils.set_random_seed(0)
        layer = keras.layers.Dropout(0.5)
    if decorrelate:
        decorrelate_dropout(strategy, [layer.seed_generator.state])
    ones = tf.ones((4, 16))
    step = tf.function(lambda: strategy.run(lambda: layer(ones, training=True)))
    return [[t.numpy() for t in strategy.experimental_local_results(step())] for _ in range(2)]


def test_replicas_draw_their_own_dropout_masks_and_replica_zero_keeps_the_one_device_draws(two_device_strategy):
    same = _dropout_masks(two_device_strategy, decorrelate=False)
    assert all((a == b).all() for a, b in same)  # Keras alone: one mask for both replicas' examples
    draws = _dropout_masks(two_device_strategy, decorrelate=True)
    assert all(not (a == b).all() for a, b in draws)
    assert not (draws[0][1] == draws[1][1]).all()  # a new mask each step on replica 1 too
    single = _dropout_masks(tf.distribute.OneDeviceStrategy("/cpu:0"), decorrelate=True)
    for (replica_zero, _), (one_device,) in zip(draws, single):
        assert (replica_zero == one_device).all()
