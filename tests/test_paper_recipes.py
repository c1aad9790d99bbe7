"""The paper-scale recipes hold the papers' hyper-parameters (the tables in their headers say where from)."""

import gin
import pytest

from tf_msemb.config import parse_config
from tf_msemb.objectives.ema_teacher_distillation import rescaled_tau_base
from test_config import recipe


pytestmark = pytest.mark.usefixtures("clean_gin")


def _bindings(name):
    gin.clear_config()
    parse_config([recipe(name)], [])
    return gin.query_parameter


def test_seed000_stage2_paper_values():
    value = _bindings("ema_distill_paper.gin")
    assert value("train.num_steps") == 105_000 and value("train.global_batch_size") == 256
    assert value("make_optimizer.name") == "lars" and value("make_optimizer.learning_rate") == 0.02
    assert value("make_optimizer.momentum") == 0.9 and value("make_optimizer.weight_decay") == 1e-6
    assert value("make_optimizer.warmup_steps") == 54_000 and value("make_optimizer.decay") == "cosine"
    assert value("EMATeacherDistillation.tau_base") == 0.99999
    assert value("EMATeacherDistillation.tau_reference_steps") == 105_000
    assert value("EMATeacherDistillation.schedule") == "cosine" and value("EMATeacherDistillation.mse") == "mean"
    assert value("make_dataset.max_tokens") == 128 and value("load_pretrained.text_normalization")
    assert value("load_pretrained.pooling") == "mean"


def test_seed000_cpu_recipe_rescales_what_depends_on_length_and_batch():
    """600 steps of 64: the teacher travels as far as in the paper, warm-up is the paper's share, lr is per 256."""
    value = _bindings("ema_distill.gin")
    steps = value("train.num_steps")
    tau_base = rescaled_tau_base(value("EMATeacherDistillation.tau_base"),
                                 value("EMATeacherDistillation.tau_reference_steps"), steps)
    assert (1 - tau_base) * steps == pytest.approx((1 - 0.99999) * 105_000)
    assert round(value("make_optimizer.warmup_fraction") * steps) == round(54_000 / 105_000 * steps)
    assert value("make_optimizer.scaling") == "linear" and value("make_optimizer.reference_batch_size") == 256
    assert value("EMATeacherDistillation.mse") == "mean" and value("load_pretrained.text_normalization")


def test_seed000_stage1_recipes_chain_nli_then_sts():
    value = _bindings("nli_stage1.gin")
    assert value("SiameseSimilarity.task") == "nli" and value("make_labeled_dataset.format") == "nli_jsonl"
    assert len(value("make_labeled_dataset.path")) == 2 and value("train.global_batch_size") == 16
    assert value("make_optimizer.learning_rate") == 2e-5 and value("make_optimizer.warmup_fraction") == 0.1
    value = _bindings("sts_stage1.gin")
    assert value("SiameseSimilarity.task") == "sts" and value("load_pretrained.text_normalization")


def test_seed002_paper_values():
    value = _bindings("moco_paper.gin")
    assert value("train.pretrained") == "bert_base_en_uncased" and value("train.tokenizer") is None
    assert value("DualMomentumContrast.target_pretrained")  # the second pretrained tower, with its own tokenizer
    assert value("DualMomentumContrast.queue_size") == 409_600 and value("DualMomentumContrast.temperature") == 0.04
    assert value("DualMomentumContrast.momentum") == 0.999 and not value("DualMomentumContrast.in_batch_negatives")
    assert value("train.global_batch_size") == 1024 and value("train.num_steps") == 78_640
    assert value("make_optimizer.name") == "adamw" and value("make_optimizer.learning_rate") == 4e-5
    assert value("make_optimizer.warmup_steps") == 400 and value("make_optimizer.decay") == "cosine"
    assert value("make_optimizer.global_clipnorm") == 10.0 and value("make_optimizer.weight_decay") == 1e-4
    assert value("load_pretrained.pooling") == "mean"
    value = _bindings("moco_paper_nli.gin")
    assert value("DualMomentumContrast.nli_weight") == 0.1 and value("DualMomentumContrast.nli_batch_size") == 128
    assert value("DualMomentumContrast.nli_hidden") == 256 and value("DualMomentumContrast.queue_size") == 409_600


def test_seed002_cpu_recipe_uses_queue_negatives_only_and_keeps_the_queue_within_the_momentum_lag():
    value = _bindings("moco.gin")
    assert not value("DualMomentumContrast.in_batch_negatives") and value("DualMomentumContrast.temperature") == 0.04
    span = value("DualMomentumContrast.queue_size") / value("train.global_batch_size")
    lag = 1 / (1 - value("DualMomentumContrast.momentum"))
    assert span / lag == pytest.approx((409_600 / 1024) / (1 / (1 - 0.999)), rel=0.05)
    assert value("make_optimizer.global_clipnorm") == 10.0


def test_seed001_paper_values():
    """Sec. 3: batch 64, 2e-5, 10K warm-up, dev MSE selection; the teacher is run live from its own directory."""
    value = _bindings("distill_paper.gin")
    assert value("train.objective").configurable.name == "MultilingualDistillation"
    # Local paths the user binds once: the student's, and the teacher's for training and the dev MSE alike.
    assert value("train.pretrained").scopes == ["STUDENT"] and value("%STUDENT") == "models/xlm-roberta-base"
    assert value("MultilingualDistillation.teacher").scopes == value("DistillationMSE.teacher").scopes == ["TEACHER"]
    assert value("%TEACHER") == "models/bert-base-nli-stsb-mean-tokens"
    assert value("MultilingualDistillation.projection") == "error"  # the paper's towers are both 768 wide
    assert value("train.global_batch_size") == 64 and value("train.num_steps") == 20 * 1_000_000 // 64
    assert value("make_optimizer.name") == "adamw" and value("make_optimizer.learning_rate") == 2e-5
    assert value("make_optimizer.warmup_steps") == 10_000 and value("make_optimizer.decay") == "linear"
    assert value("make_optimizer.weight_decay") == 0.01 and value("make_optimizer.global_clipnorm") == 1.0
    assert value("load_pretrained.max_length") == value("make_dataset.max_tokens") == 128
    assert value("load_pretrained.pooling") == "mean" and not value("load_pretrained.normalize")
    assert value("train.best_metric") == "distillation/mse" and value("train.best_mode") == "min"
