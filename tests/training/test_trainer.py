"""The trainer's parts on their own: exports of every named model, the loop's schedule, run facts to objectives."""

import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.base import RunFacts
from tf_msemb.objectives.dual_momentum_contrast import DualMomentumContrast
from tf_msemb.objectives.ema_teacher_distillation import EMATeacherDistillation
from tf_msemb.training.errors import NonFiniteLossError
from tf_msemb.training.dev_evaluation import DevEvaluation
from tf_msemb.training.trainer import DevSteps
from tf_msemb.training.trainer import Exporter
from tf_msemb.training.trainer import LoopSettings
from tf_msemb.training.trainer import build_objective
from tf_msemb.training.trainer import train_loop

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, dropout=0.0)


def _moco(tokenizer, separate):
    keras.utils.set_random_seed(0)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length, **TINY)
    model = DualMomentumContrast(encoder, separate_encoders=separate, queue_size=8, run=RunFacts(tokenizer, 10, 4))
    model.build()
    # Different target weights, so the two exports must differ.
    model.target_encoder.set_weights([w + 0.5 for w in model.target_encoder.get_weights()])
    return model


@pytest.mark.slow
def test_exporter_writes_every_model_the_objective_names(tokenizer, tmp_path):
    model = _moco(tokenizer, separate=True)
    assert set(model.exports()) == {"encoder", "target"}
    path = Exporter(model, str(tmp_path), chief=True)(7, final=True)
    assert path == str(tmp_path / "export" / "final")
    sentences = tf.constant(["Ein Hund läuft.", "A dog runs."])
    for directory, encoder in ((tmp_path / "export", model.encoder), (tmp_path / "export" / "target", model.target_encoder)):
        for version in ("7", "final"):
            loaded = tf.saved_model.load(str(directory / version))
            expected = keras.ops.convert_to_numpy(encoder(tokenizer(sentences)))
            expected /= np.linalg.norm(expected, axis=1, keepdims=True)
            np.testing.assert_allclose(loaded(sentences).numpy(), expected, atol=1e-5)
        metadata = json.loads((directory / "final" / "tf_msemb_export.json").read_text())
        assert metadata["objective"]["class"] == "DualMomentumContrast" and metadata["objective"]["queue_size"] == 8


@pytest.mark.slow
def test_a_best_last_step_is_copied_from_its_export_not_saved_again(tokenizer, tmp_path, monkeypatch):
    model = _moco(tokenizer, separate=True)
    exporter = Exporter(model, str(tmp_path), chief=True)
    dev = DevEvaluation([lambda embed: {}], best_metric="dev/mean")
    dev.record(7, {"dev/mean": 0.5})
    exporter(7, final=True)
    saves = []
    monkeypatch.setattr("tf_msemb.training.trainer.export_version", lambda *args, **kwargs: saves.append(args))
    DevSteps(dev, model, exporter, None, None, str(tmp_path), chief=True).export_best(7)
    assert not saves and int(dev.exported_step.numpy()) == 7
    sentences = tf.constant(["Ein Hund läuft.", "A dog runs."])
    for directory in (tmp_path / "export", tmp_path / "export" / "target"):
        best = tf.saved_model.load(str(directory / "best"))(sentences).numpy()
        np.testing.assert_allclose(best, tf.saved_model.load(str(directory / "7"))(sentences).numpy(), atol=1e-6)
        metadata = json.loads((directory / "best" / "tf_msemb_export.json").read_text())
        assert metadata["selection"] == {"metric": "dev/mean", "mode": "max", "value": 0.5, "step": 7}
        assert metadata["training_step"] == 7
    assert json.loads((tmp_path / "export" / "7" / "tf_msemb_export.json").read_text())["selection"] is None
    with pytest.raises(ValueError, match="Step 8 has no export to copy"):
        exporter.copy_as_best(8, dev.selection)


def test_a_shared_encoder_is_exported_once(tokenizer, tmp_path):
    model = _moco(tokenizer, separate=False)
    assert set(model.exports()) == {"encoder"}
    Exporter(model, str(tmp_path), chief=True)(3)
    assert sorted(os.listdir(tmp_path / "export")) == ["3"]


def test_non_chief_workers_export_too_but_keep_nothing(tokenizer, tmp_path, monkeypatch):
    written = []

    def export_version(tokenizer, encoder, export_dir, step, info, final, provenance):
        assert provenance["dev_results"] == [] and provenance["operative_config"] is None  # the chief's files
        written.append(export_dir)
        os.makedirs(os.path.join(export_dir, str(step)))
        return os.path.join(export_dir, str(step))

    monkeypatch.setattr("tf_msemb.training.trainer.export_version", export_version)
    Exporter(_moco(tokenizer, separate=True), str(tmp_path), chief=False)(5)
    assert len(written) == 2  # both models: a save under MultiWorkerMirroredStrategy needs every worker
    assert not os.path.exists(tmp_path / "export") and not any(os.path.exists(d) for d in written)


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, step, final=False):
        self.calls.append(step)

    save = write = __call__


class _Checkpoints(_Recorder):
    latest = "ckpt-4"


def _loop(losses, settings, start=0):
    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.5))
    values = iter(losses)
    checkpoints, exporter, log = _Checkpoints(), _Recorder(), _Recorder()
    inputs = type("Inputs", (), {"source_files": []})()
    step = train_loop(lambda step: {"loss": tf.constant(next(values))}, model, inputs, checkpoints, exporter, log,
                      settings, start)
    return step, checkpoints.calls, exporter.calls, log.calls


def test_loop_logs_checkpoints_and_exports_on_schedule():
    settings = LoopSettings(num_steps=10, log_every=4, checkpoint_every=3, export_every=5)
    step, saves, exports, logs = _loop([1.0] * 10, settings)
    assert step == 10
    assert logs == [4, 8, 10]  # and always the last step
    assert saves == [3, 6, 9]  # the final checkpoint and export are the caller's
    assert exports == [5]


def test_loop_resumes_from_its_start_step():
    step, _, _, logs = _loop([1.0] * 4, LoopSettings(num_steps=10, log_every=2, checkpoint_every=100), start=6)
    assert step == 10 and logs == [8, 10]


def test_loop_stops_on_a_non_finite_loss_naming_the_last_checkpoint():
    with pytest.raises(NonFiniteLossError, match=r"Loss became nan at step 3; the last good checkpoint is ckpt-4"):
        _loop([1.0, 0.5, math.nan, 0.1], LoopSettings(num_steps=10, log_every=1, checkpoint_every=100))


def test_objectives_receive_the_run_facts(tokenizer, tmp_path):
    run = RunFacts(tokenizer, total_steps=37, global_batch_size=12)

    def encoder(vocabulary_size, max_sequence_length):
        return SentenceEncoder(vocabulary_size, max_sequence_length=max_sequence_length, **TINY)

    model, model_tokenizer = build_objective(EMATeacherDistillation, run, encoder, None, None, str(tmp_path), "float32")
    assert model_tokenizer is tokenizer and model.run == run
    assert model.total_steps == 37  # the tau schedule's K is the run's length, never a separate setting
    assert model.exports()["encoder"] == (tokenizer, model.encoder)
    assert float(model.tau(37)) == pytest.approx(1.0) and float(model.tau(0)) == pytest.approx(0.99999)


def test_train_gives_each_replica_its_own_dropout_after_restoring(tokenizer, quickstart_records, tmp_path,
                                                                  two_device_strategy, monkeypatch):
    """The trainer hands every dropout seed state of the model to `decorrelate_dropout`, after the restore."""
    import functools

    from tf_msemb.data.pipeline import make_distributed_dataset
    from tf_msemb.objectives.translation_ranking import TranslationRanking
    from tf_msemb.training import trainer

    calls = []

    def spy(strategy, seed_states):
        calls.append((strategy, [state.path for state in seed_states]))
        return decorrelate(strategy, seed_states)

    decorrelate = trainer.decorrelate_dropout
    monkeypatch.setattr(trainer, "decorrelate_dropout", spy)
    encoder = functools.partial(SentenceEncoder, **TINY | {"dropout": 0.1})
    trainer.train(str(tmp_path / "run"), objective=TranslationRanking, tokenizer=tokenizer, encoder=encoder,
                  strategy=two_device_strategy, global_batch_size=8, num_steps=1, log_every=1,
                  dataset_fn=functools.partial(make_distributed_dataset, corpora=[quickstart_records], max_tokens=48))
    [(strategy, paths)] = calls
    assert strategy is two_device_strategy
    assert len(paths) >= 3 and all(path.endswith("seed_generator_state") for path in paths)


def test_frozen_token_embeddings_stay_put_in_student_teacher_and_export(tokenizer, quickstart_records, tmp_path,
                                                                         capsys, monkeypatch):
    """`train.frozen_embeddings` on seed 000's objective: after two steps the student's table is its initial one
    and so is the EMA teacher's, while every other weight of both moved; the optimizer keeps no moments for the
    table, and the export lists it among its variables, not its trainable ones."""
    import functools

    from tf_msemb.data.pipeline import make_distributed_dataset
    from tf_msemb.training import trainer

    def encoder(vocabulary_size, max_sequence_length):
        return SentenceEncoder(vocabulary_size, max_sequence_length=max_sequence_length, **TINY)

    capture = {}
    build = trainer.build_objective

    def keep(*args, **kwargs):
        model, model_tokenizer = build(*args, **kwargs)
        capture["model"] = model
        capture["start"] = {id(w): w.numpy() for w in model.encoder.weights}
        return model, model_tokenizer

    keras.utils.set_random_seed(5)
    monkeypatch.setattr(trainer, "build_objective", keep)
    trainer.train(str(tmp_path / "run"), tokenizer=tokenizer, encoder=encoder, global_batch_size=8, num_steps=2,
                  objective=functools.partial(EMATeacherDistillation, tau_base=0.5, schedule="constant"),
                  log_every=1, frozen_embeddings=True,
                  dataset_fn=functools.partial(make_distributed_dataset, corpora=[quickstart_records], max_tokens=48))
    assert "Token embeddings frozen" in capsys.readouterr().out
    model = capture["model"]
    table = model.encoder.backbone.token_embedding.embeddings
    start = capture["start"]
    teacher_table = model.teacher.backbone.token_embedding.embeddings
    np.testing.assert_array_equal(table.numpy(), start[id(table)])
    np.testing.assert_array_equal(teacher_table.numpy(), start[id(table)])
    others = [(s, t) for s, t in zip(model.encoder.weights, model.teacher.weights) if s is not table]
    assert min(np.abs(s.numpy() - start[id(s)]).max() for s, _ in others if s.trainable) > 0
    assert min(np.abs(t.numpy() - start[id(s)]).max() for s, t in others if s.trainable) > 0
    moments = [v for v in model.optimizer.variables if tuple(v.shape) == tuple(table.shape)]
    assert not moments
    loaded = tf.saved_model.load(str(tmp_path / "run" / "export" / "final"))
    shapes = lambda variables: [tuple(v.shape) for v in variables]
    assert tuple(table.shape) in shapes(loaded.variables)
    assert tuple(table.shape) not in shapes(loaded.trainable_variables)


def test_exports_record_an_objectives_nested_widths(tokenizer, tmp_path):
    from tf_msemb.objectives.translation_ranking import TranslationRanking

    encoder = SentenceEncoder(tokenizer.vocabulary_size, max_sequence_length=tokenizer.max_length, **TINY)
    model = TranslationRanking(encoder, run=RunFacts(tokenizer, matryoshka_widths=(8, 16)))
    assert Exporter(model, str(tmp_path), chief=True).info["matryoshka"] == {"widths": [16, 8], "weights": [1.0, 1.0]}
    assert "matryoshka" not in Exporter(TranslationRanking(encoder), str(tmp_path), chief=True).info


def test_bfloat16_training_is_refused_before_anything_runs_where_onednn_has_no_kernel(tokenizer, tmp_path,
                                                                                    capped_sapphire_rapids):
    from tf_msemb.cpus import MachineError
    from tf_msemb.training.errors import one_line
    from tf_msemb.training.trainer import train

    with pytest.raises(MachineError) as error:
        train(str(tmp_path / "run"), objective=None, tokenizer=tokenizer, precision="mixed_bfloat16")
    assert one_line(error.value).startswith("train.precision = 'mixed_bfloat16' needs oneDNN ISA avx512_core or "
                                            "avx2_vnni_2 for bfloat16 matmuls")
    assert not (tmp_path / "run").exists()  # refused before the run made anything
