"""configs/ems_paper.gin holds seed 003's hyper-parameters (Sec. IV-B/C), and both EMS configs say where they differ."""

import gin
import pytest

from conftest import REPO
from tf_msemb.config import parse_config
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.ems import EMS
from tf_msemb.training.adam_l2 import AdamL2
from tf_msemb.training.optimizers import make_optimizer

PAPER = {
    # 152 pairs per GPU on 4 GPUs; 3 epochs.
    "train.global_batch_size": 608,
    "train.strategy": "mirrored",
    "train.num_steps": 733176,
    "SentenceEncoder.num_layers": 6,
    "SentenceEncoder.num_heads": 16,
    "SentenceEncoder.hidden_dim": 1024,
    "SentenceEncoder.intermediate_dim": 4096,
    "SentenceEncoder.dropout": 0.1,
    "SentenceEncoder.pooling": "mean",
    # Lower-cased text, truncated (not dropped) at 120 tokens.
    "SentencePieceTokenizer.lowercase": True,
    "SentencePieceTokenizer.max_length": 120,
    "make_dataset.max_tokens": 120,
    "make_dataset.truncate": True,
    "EMS.xtr": True,
    "EMS.language_embedding": True,
    "EMS.language_dim": 128,
    "EMS.contrastive": "info_nce",
    "EMS.contrastive_mlp": True,
    "EMS.contrastive_dim": 128,
    "EMS.temperature": 0.1,
    "EMS.gather_negatives": False,
    "EMS.share_output_embedding": False,
    # Adam with L2 1e-5, lr 3e-4, 10k linear warm-up, then constant.
    "make_optimizer.name": "adam_l2",
    "make_optimizer.weight_decay": 1e-5,
    "make_optimizer.learning_rate": 3e-4,
    "make_optimizer.warmup_steps": 10000,
    "make_optimizer.decay": "constant",
}


pytestmark = pytest.mark.usefixtures("clean_gin")


@pytest.fixture
def paper_config():
    parse_config([f"{REPO}/configs/ems_paper.gin"], [])


def test_the_paper_config_pins_the_papers_values(paper_config):
    for name, value in PAPER.items():
        assert gin.query_parameter(name) == value, name


def test_the_configured_optimizer_and_objective_are_the_papers(paper_config):
    optimizer = make_optimizer(total_steps=733176, global_batch_size=608)
    assert isinstance(optimizer, AdamL2) and optimizer.l2 == 1e-5 and not optimizer.weight_decay
    rates = [float(optimizer.learning_rate)]
    for step in (4999, 10000, 400000, 733175):
        optimizer.iterations.assign(step)
        rates.append(float(optimizer.learning_rate))
    assert rates == pytest.approx([3e-8, 1.5e-4, 3e-4, 3e-4, 3e-4])
    encoder = SentenceEncoder(40, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=16, max_sequence_length=8)
    model = EMS(encoder)
    assert model.gather_negatives is False and model.share_output_embedding is False
    assert model.temperature == 0.1 and model.contrastive == "info_nce" and model.margin == 0.0


@pytest.mark.parametrize("name", ["ems.gin", "ems_paper.gin"])
def test_each_ems_config_opens_with_the_papers_table(name):
    with open(f"{REPO}/configs/{name}") as f:
        header = f.read().split("\ninclude ")[0]
    assert "| paper (seed 003)" in header and "| this config" in header and "| why they differ" in header
    for row in ("batch", "contrastive negatives", "optimizer", "learning rate", "schedule", "max length"):
        assert f"\n# {row} " in header, row
