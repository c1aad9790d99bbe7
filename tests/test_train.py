"""The train entry point, run as a user runs it: `python -m tf_msemb.train ...`."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import needs_bfloat16

PROGRESS = re.compile(r"^step (\d+)/(\d+) loss ([\d.e+-]+) accuracy [\d.e+-]+ lr [\d.e+-]+ pairs/s [\d.]+ ETA \d+:\d\d:\d\d$")


def run_train(model_dir, spm_model, records, *params, extra=()):
    bindings = [
        f"SentencePieceTokenizer.model_file = '{spm_model}'",
        f"make_dataset.corpora = ['{records}']",
        "SentenceEncoder.hidden_dim = 32",
        "SentenceEncoder.num_layers = 1",
        "SentenceEncoder.intermediate_dim = 64",
        "train.global_batch_size = 16",
        *params,
    ]
    command = [sys.executable, "-m", "tf_msemb.train", "--gin_file=configs/quickstart.gin", f"--model_dir={model_dir}"]
    command += [f"--gin_param={b}" for b in bindings] + list(extra)
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO)


def progress_lines(stdout):
    return [PROGRESS.match(line) for line in stdout.splitlines() if PROGRESS.match(line)]


@pytest.mark.slow
def test_train_checkpoints_logs_and_exports_then_resumes(tmp_path, spm_model, quickstart_records):
    model_dir = tmp_path / "run"
    result = run_train(model_dir, spm_model, quickstart_records, "train.num_steps = 60", "train.log_every = 10",
                       "train.checkpoint_every = 30", "make_optimizer.warmup_steps = 5")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = progress_lines(result.stdout)
    assert [int(m.group(1)) for m in lines] == [10, 20, 30, 40, 50, 60]
    assert float(lines[-1].group(3)) < 0.7 * float(lines[0].group(3))
    export = model_dir / "export" / "final"
    assert f"Exported SavedModel: {export}" in result.stdout
    assert tf.train.latest_checkpoint(str(model_dir / "checkpoints")).endswith("ckpt-60")
    assert os.path.exists(model_dir / "checkpoints" / "ckpt-30.index")
    assert "TranslationRanking.scale = 20.0" in (model_dir / "operative_config.gin").read_text()
    events = os.listdir(model_dir / "train")
    assert events and events[0].startswith("events.out.tfevents")
    first_export = tf.saved_model.load(str(export))(tf.constant(["Die Frau liest."])).numpy()
    versioned = tf.saved_model.load(str(model_dir / "export" / "60"))(tf.constant(["Die Frau liest."])).numpy()
    np.testing.assert_array_equal(versioned, first_export)
    metadata = json.loads((export / "tf_msemb_export.json").read_text())
    assert metadata["training_step"] == 60 and metadata["embedding_dim"] == 32
    assert metadata["objective"] == {"class": "TranslationRanking", "scale": 20.0, "temperature": None, "margin": 0.0}
    assert metadata["tokenizer"]["class"] == "SentencePieceTokenizer"
    assert metadata["tokenizer"]["asset"] == os.path.basename(spm_model)
    assert metadata["encoder"]["config"]["num_layers"] == 1 and metadata["normalization"].startswith("l2")

    resumed = run_train(model_dir, spm_model, quickstart_records, "train.num_steps = 80", "train.log_every = 10")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resumed from" in resumed.stdout and "ckpt-60" in resumed.stdout
    assert [int(m.group(1)) for m in progress_lines(resumed.stdout)] == [70, 80]
    assert sorted(os.listdir(model_dir / "export")) == ["60", "80", "best", "final"]  # the recipe selects a best step
    assert json.loads((export / "tf_msemb_export.json").read_text())["training_step"] == 80
    second_export = tf.saved_model.load(str(export))(tf.constant(["Die Frau liest."])).numpy()
    assert not np.allclose(first_export, second_export)


@pytest.mark.slow
def test_mirrored_strategy_on_two_logical_cpus(tmp_path, spm_model, quickstart_records):
    result = run_train(tmp_path / "m", spm_model, quickstart_records, "train.strategy = 'mirrored'",
                       "train.num_steps = 4", "train.log_every = 2", extra=["--cpu_devices=2"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert [int(m.group(1)) for m in progress_lines(result.stdout)] == [2, 4]
    assert (tmp_path / "m" / "export" / "final" / "saved_model.pb").exists()


@pytest.mark.slow
def test_smoke_switch_shrinks_the_recipe(tmp_path, spm_model, quickstart_records):
    result = run_train(tmp_path / "s", spm_model, quickstart_records, extra=["--smoke"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert [int(m.group(1)) for m in progress_lines(result.stdout)] == [1, 2, 3]
    assert "train.num_steps = 3" in (tmp_path / "s" / "operative_config.gin").read_text()


@pytest.mark.slow
def test_objective_features_and_exports_reach_the_trainer(tmp_path, spm_model, quickstart_records):
    """MoCo with two encoders and the NLI head: its declared NLI batches are read, both towers exported."""
    rows = [{"sentence1": f"A man plays {i}.", "sentence2": "Someone plays.", "gold_label": "entailment"}
            for i in range(40)]
    (tmp_path / "nli.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model_dir = tmp_path / "moco"
    result = run_train(model_dir, spm_model, quickstart_records, "train.objective = @DualMomentumContrast",
                       "DualMomentumContrast.separate_encoders = True", "DualMomentumContrast.queue_size = 32",
                       "DualMomentumContrast.nli_weight = 0.1", f"DualMomentumContrast.nli_path = '{tmp_path}/nli.jsonl'",
                       "DualMomentumContrast.nli_batch_size = 8", "train.num_steps = 2", "train.log_every = 1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert " nli_loss " in result.stdout
    assert f"target: {model_dir / 'export' / 'target' / 'final'}" in result.stdout
    assert sorted(os.listdir(model_dir / "export")) == ["2", "best", "final", "target"]
    assert sorted(os.listdir(model_dir / "export" / "target")) == ["2", "best", "final"]  # the best step, both towers
    sentences = tf.constant(["Die Frau liest."])
    source = tf.saved_model.load(str(model_dir / "export" / "final"))(sentences).numpy()
    target = tf.saved_model.load(str(model_dir / "export" / "target" / "final"))(sentences).numpy()
    assert not np.allclose(source, target)  # two towers, each exported


def test_missing_gin_file_is_named(tmp_path):
    command = [sys.executable, "-m", "tf_msemb.train", "--gin_file=configs/nope.gin", f"--model_dir={tmp_path}"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert result.returncode != 0
    assert "nope.gin" in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "binding,message",
    [
        ("train.num_stepz = 3", "num_stepz"),
        ("NoSuchThing.x = 1", "NoSuchThing"),
        ("train.num_steps = (", "EOF in multi-line statement"),
    ],
)
def test_bad_gin_gives_one_clear_line(tmp_path, spm_model, quickstart_records, binding, message):
    result = run_train(tmp_path / "b", spm_model, quickstart_records, binding)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: bad gin configuration") and message in last


def _records(directory, rows, tgt_lang="de", teacher_dim=None, num_shards=2, teacher=None):
    """`num_shards` TFRecord shards of `rows` en-`tgt_lang` pairs; returns the shards' glob.

    With `teacher_dim`, pair i carries the teacher vector `teacher(i)` (default: ones).
    """
    from tf_msemb.data.records import make_example

    directory.mkdir()
    for shard in range(num_shards):
        with tf.io.TFRecordWriter(str(directory / f"c.en-{tgt_lang}.tfrecord-{shard:05d}-of-{num_shards:05d}")) as w:
            for i in range(shard, rows, num_shards):
                vector = (teacher(i) if teacher else [1.0] * teacher_dim) if teacher_dim else None
                w.write(make_example(f"the house {i}", f"das Haus {i}", "en", tgt_lang, teacher=vector))
    return directory / f"c.en-{tgt_lang}.tfrecord-*"


def _corrupt_middle(path):
    data = bytearray(path.read_bytes())
    data[2 * len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))


def _error_line(result):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ")
    return last


def test_a_corrupt_shard_met_during_training_is_named(tmp_path, spm_model):
    shards = _records(tmp_path / "c", 300)
    shard = sorted((tmp_path / "c").glob("c.en-de.tfrecord-*"))[1]
    _corrupt_middle(shard)  # its first record still reads: found only while training
    last = _error_line(run_train(tmp_path / "run", spm_model, shards, "train.num_steps = 5"))
    assert f"Corrupt TFRecord shard {shard}: corrupted record at" in last


def test_an_empty_corpus_is_named(tmp_path, spm_model):
    last = _error_line(run_train(tmp_path / "run", spm_model, tmp_path / "nothing-*.tfrecord"))
    assert "nothing-*.tfrecord" in last and "has no data" in last


def test_a_teacher_of_another_width_is_named(tmp_path, spm_model):
    shards = _records(tmp_path / "c", 40, teacher_dim=8)
    last = _error_line(run_train(tmp_path / "run", spm_model, shards, "train.objective = @MultilingualDistillation",
                                 "MultilingualDistillation.teacher_dim = 16"))
    assert "c.en-de.tfrecord-00000-of-00002 holds teacher vectors of 8 values" in last and "teacher_dim=16" in last


def test_an_unknown_language_tag_is_named(tmp_path, spm_model):
    shards = _records(tmp_path / "c", 40, tgt_lang="xx")
    last = _error_line(run_train(tmp_path / "run", spm_model, shards, "train.objective = @EMS",
                                 "EMS.languages = ['en', 'de']"))
    assert "Unknown language tag 'xx'" in last and "knows en de" in last


def test_a_nan_loss_stops_the_run_and_names_the_last_good_checkpoint(tmp_path, spm_model):
    # Read in order, 16 pairs a step: teacher vectors turn NaN from pair 100 on, i.e. in step 7.
    shards = _records(tmp_path / "c", 400, teacher_dim=32, num_shards=1,
                      teacher=lambda i: [float("nan") if i >= 100 else 0.1] * 32)
    last = _error_line(run_train(tmp_path / "run", spm_model, shards, "train.objective = @MultilingualDistillation",
                                 "MultilingualDistillation.teacher_dim = 32", "make_dataset.shuffle_buffer = 0",
                                 "train.num_steps = 20", "train.checkpoint_every = 3", "train.log_every = 1"))
    checkpoint = tmp_path / "run" / "checkpoints" / "ckpt-6"
    assert f"Loss became nan at step 7; the last good checkpoint is {checkpoint}." in last
    assert checkpoint.with_suffix(".index").exists()
    assert not (tmp_path / "run" / "export").exists()


def test_records_without_a_needed_field_are_named(tmp_path, spm_model):
    shards = _records(tmp_path / "c", 40)
    last = _error_line(run_train(tmp_path / "run", spm_model, shards, "train.objective = @MultilingualDistillation",
                                 "MultilingualDistillation.teacher_dim = 8"))
    assert "c.en-de.tfrecord-00000-of-00002 lacks the field(s) teacher" in last


@pytest.mark.slow  # XLA compiles a new program for every padded length: about 45 s
@needs_bfloat16
def test_bfloat16_with_xla_trains_and_exports_float32(tmp_path, spm_model, quickstart_records):
    model_dir = tmp_path / "run"
    result = run_train(model_dir, spm_model, quickstart_records, "train.precision = 'mixed_bfloat16'",
                       "train.jit_compile = True", "train.num_steps = 4", "train.log_every = 2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [int(m.group(1)) for m in progress_lines(result.stdout)] == [2, 4]
    model = tf.saved_model.load(str(model_dir / "export" / "final"))
    vectors = model(tf.constant(["Die Frau liest.", "The woman reads."]))
    assert vectors.dtype == tf.float32
    np.testing.assert_allclose(np.linalg.norm(vectors.numpy(), axis=1), 1.0, atol=1e-5)
    dtypes = tf.train.load_checkpoint(str(model_dir / "checkpoints" / "ckpt-4")).get_variable_to_dtype_map()
    # Weights and optimizer slots stay float32 under mixed precision (the dev selection's best value, under
    # evaluation/, is a float64 bookkeeping number, not a weight).
    floating = {dtype for name, dtype in dtypes.items() if dtype.is_floating and not name.startswith("evaluation/")}
    assert floating == {tf.float32}


@pytest.mark.slow
def test_gradient_caching_through_the_command_line_trains(tmp_path, spm_model, quickstart_records):
    """`train.gradient_cache_chunk` reaches the objective (exact resume: tests/training/test_resume.py)."""
    result = run_train(tmp_path / "run", spm_model, quickstart_records, "train.num_steps = 8",
                       "train.gradient_cache_chunk = 4", "train.log_every = 4", "make_optimizer.warmup_steps = 2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train.gradient_cache_chunk = 4" in (tmp_path / "run" / "operative_config.gin").read_text()
    losses = [float(m.group(3)) for m in progress_lines(result.stdout)]
    assert len(losses) == 2 and losses[1] < losses[0]


def test_gradient_caching_on_a_per_pair_objective_is_one_error_line(tmp_path, spm_model, quickstart_records):
    result = run_train(tmp_path / "run", spm_model, quickstart_records, "train.gradient_cache_chunk = 4",
                       "train.objective = @SiameseSimilarity", "train.dataset_fn = @make_distributed_labeled_dataset")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: train.gradient_cache_chunk = 4 needs an objective whose loss couples the sentences of a batch; "
        "SiameseSimilarity's loss is per pair"), result.stderr[-2000:]


def test_gradient_caching_under_xla_is_one_error_line(tmp_path, spm_model, quickstart_records):
    result = run_train(tmp_path / "run", spm_model, quickstart_records, "train.gradient_cache_chunk = 4",
                       "train.jit_compile = True")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: train.gradient_cache_chunk = 4 runs its chunks in a loop of dynamic slices, which XLA does not "
        "compile; unset train.jit_compile."), result.stderr[-2000:]
