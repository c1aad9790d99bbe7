"""Teacher and student (or MoCo's two towers) from Hugging Face checkpoints with different tokenizers and widths.

An XLM-R student (SentencePiece) learns from a BERT teacher (WordPiece): live, from precomputed vectors, and as
MoCo's target tower; a 48-wide teacher gets a learned projection or stops with both widths named.
"""

import json

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from conftest import run
from pretrained_checkpoints import checkpoint
from pretrained_checkpoints import widened
from tf_msemb.data.features import RawText
from tf_msemb.data.features import TeacherTokens
from tf_msemb.data.features import TeacherVectors
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.records import parse_examples
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.models.teacher import load_teacher
from tf_msemb.objectives.base import RunFacts
from tf_msemb.objectives.dual_momentum_contrast import DualMomentumContrast
from tf_msemb.objectives.multilingual_distillation import MultilingualDistillation
from tf_msemb.text_files import CorpusError

STUDENT, TEACHER = "xlm_roberta", "bert_wordpiece_uncased"


@pytest.fixture(scope="module")
def wide_teacher(tmp_path_factory):
    """A 48-wide BERT with the WordPiece tokenizer of `TEACHER`."""
    return widened(TEACHER, tmp_path_factory.mktemp("teachers") / "bert48", 48)


def _student():
    """The XLM-R student, dropout off so a training step's loss can be recomputed."""
    tokenizer, encoder = load_pretrained(checkpoint(STUDENT))
    for layer in encoder._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    return tokenizer, encoder


def _compile(model):
    model.build()
    model.compile(optimizer=keras.optimizers.SGD(0.5))
    model.optimizer.build(model.trainable_variables)
    return model


def _batch(records, tokenizer, model, size=8):
    batch = next(iter(make_dataset([records], tokenizer, size, max_tokens=32, shuffle_buffer=0,
                                   features=model.input_features + [RawText()])))
    return {name: value for name, value in batch.items() if not name.endswith("_text")}, batch


def _distillation_loss(target, student, batch):
    src, tgt = student(batch["src"]).numpy(), student(batch["tgt"]).numpy()
    return np.mean(np.sum((target - src) ** 2, 1)) + np.mean(np.sum((target - tgt) ** 2, 1))


def test_a_teacher_keeps_its_own_pooling_and_normalization_whatever_the_students_bindings(clean_gin):
    gin.parse_config("load_pretrained.pooling = 'mean'\nload_pretrained.normalize = False")
    _, student = load_pretrained(checkpoint(STUDENT))
    _, teacher = load_teacher(checkpoint(STUDENT))
    assert (student.pooling_spec, student.normalize) == ("mean", False)
    assert (teacher.pooling_spec, teacher.normalize) == ("first", True) and not teacher.trainable_variables


def test_a_teacher_takes_its_own_prompt_not_the_students(clean_gin):
    """The student bound to a prompt the teacher's checkpoint lacks (it would become the literal text "query")."""
    gin.parse_config("load_pretrained.prompt = 'document'")
    prompted = checkpoint("xlm_roberta_tokenizer_json")  # prompts query / document, default query
    student_tokenizer, _ = load_pretrained(prompted)
    assert student_tokenizer.prompt == "passage: "
    assert load_teacher(prompted)[0].prompt == "query: "  # the checkpoint's default, not the binding
    assert load_teacher(prompted, prompt="document")[0].prompt == "passage: "
    assert load_teacher(checkpoint(TEACHER))[0].prompt == ""


def test_live_teacher_tokenizes_the_source_with_its_own_tokenizer(quickstart_records):
    tokenizer, student = _student()
    model = _compile(MultilingualDistillation(student, teacher=checkpoint(TEACHER)))
    assert model.encoder is student and model.teacher_dim == 32
    assert [type(f) for f in model.input_features] == [TeacherTokens]
    batch, raw = _batch(quickstart_records, tokenizer, model)
    want = model.teacher_tokenizer(raw["src_text"])
    width = batch["teacher_src"]["token_ids"].shape[1]
    np.testing.assert_array_equal(batch["teacher_src"]["token_ids"], want["token_ids"][:, :width])
    assert batch["teacher_src"]["token_ids"].shape != batch["src"]["token_ids"].shape or \
        not np.array_equal(batch["teacher_src"]["token_ids"], batch["src"]["token_ids"])
    target = model.teacher(want).numpy()
    expected = _distillation_loss(target, student, batch)
    teacher_before = [w.numpy().copy() for w in model.teacher.weights]
    student_before = [w.numpy().copy() for w in student.trainable_weights]
    assert float(model.train_step(batch)["loss"]) == pytest.approx(expected, rel=1e-4)
    for weight, before in zip(model.teacher.weights, teacher_before):
        np.testing.assert_array_equal(weight.numpy(), before)
    assert any(not np.array_equal(w.numpy(), b) for w, b in zip(student.trainable_weights, student_before))


def test_a_wider_live_teacher_gets_a_learned_projection_exported_with_the_student(quickstart_records, wide_teacher):
    tokenizer, student = _student()
    model = _compile(MultilingualDistillation(student, teacher=wide_teacher))
    projected = model.encoder
    assert isinstance(projected, ProjectedEncoder) and projected.encoder is student and projected.output_dim == 48
    assert model.exports()["encoder"] == (None, projected)  # the run's tokenizer (none here) and the projection
    batch, _ = _batch(quickstart_records, tokenizer, model)
    target = model.teacher(batch["teacher_src"]).numpy()
    expected = _distillation_loss(target, projected, batch)
    kernel = projected.projection.kernel.numpy().copy()
    assert float(model.train_step(batch)["loss"]) == pytest.approx(expected, rel=1e-4)
    assert not np.array_equal(projected.projection.kernel.numpy(), kernel)  # the projection learns


def test_a_wider_teacher_can_be_refused_with_both_widths(wide_teacher):
    _, student = load_pretrained(checkpoint(STUDENT))
    with pytest.raises(ValueError, match=r"^Student width 32 differs from teacher width 48; set "):
        MultilingualDistillation(student, teacher=wide_teacher, projection="error")


def test_precomputed_vectors_of_a_wider_teacher_directory(quickstart_records, wide_teacher, tmp_path):
    out = run([f"{REPO}/tools/precompute_teacher.py", f"--teacher={wide_teacher}", f"--manifest={quickstart_records}",
               f"--output_dir={tmp_path}/t"], tmp_path)
    assert "The teacher encodes packed (float32)." in out and "Teacher vectors of dim 48 added" in out
    manifest = str(tmp_path / "t" / "qs.manifest.json")
    teacher_tokenizer, teacher = load_teacher(wide_teacher)
    with open(manifest, encoding="utf-8") as f:
        shard = tmp_path / "t" / json.load(f)["pairs"]["en-de"]["files"][0]
    records = tf.constant(list(tf.data.TFRecordDataset(str(shard)).take(5).as_numpy_iterator()))
    parsed = parse_examples(records, [TeacherVectors(48)])
    np.testing.assert_allclose(parsed["teacher"], teacher(teacher_tokenizer(parsed["src"])), atol=1e-5)

    tokenizer, student = _student()
    model = _compile(MultilingualDistillation(student, teacher_dim=48))
    assert isinstance(model.encoder, ProjectedEncoder) and model.input_features[0].dim == 48
    batch, _ = _batch(manifest, tokenizer, model)
    expected = _distillation_loss(batch["teacher"].numpy(), model.encoder, batch)
    assert float(model.train_step(batch)["loss"]) == pytest.approx(expected, rel=1e-4)
    with pytest.raises(CorpusError, match="holds teacher vectors of 48 values but the objective expects teacher_dim=32"):
        make_dataset([manifest], tokenizer, 8, max_tokens=32, features=[TeacherVectors(32)])


def test_moco_towers_with_their_own_tokenizers(quickstart_records, wide_teacher):
    tokenizer, student = _student()
    model = DualMomentumContrast(student, target_pretrained=checkpoint(TEACHER), queue_size=8, in_batch_negatives=True,
                                 run=RunFacts(tokenizer=tokenizer))
    assert model.exports()["target"] == (model.target_tokenizer, model.target_encoder)
    batch, raw = _batch(quickstart_records, tokenizer, model, size=4)
    want = model.target_tokenizer(raw["tgt_text"])
    np.testing.assert_array_equal(batch["tgt"]["token_ids"], want["token_ids"][:, :batch["tgt"]["token_ids"].shape[1]])
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    before = [w.numpy().copy() for w in model.target_encoder.trainable_weights]
    assert np.isfinite(float(model.train_step(batch)["loss"]))
    assert any(not np.array_equal(w.numpy(), b) for w, b in zip(model.target_encoder.trainable_weights, before))
    with pytest.raises(ValueError, match=r"gives 48-wide vectors and the source encoder 32-wide"):
        DualMomentumContrast(student, target_pretrained=wide_teacher, queue_size=8)
