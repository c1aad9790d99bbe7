"""configs/bide_paper.gin holds seed 004's hyper-parameters (Sec. 3-4, footnote 3)."""

import gin
import pytest

from conftest import REPO
from tf_msemb.config import parse_config

PAPER = {
    "train.global_batch_size": 100,
    "train.num_steps": 40_000_000,
    "SentenceEncoder.num_layers": 3,
    "SentenceEncoder.num_heads": 8,
    "SentenceEncoder.hidden_dim": 512,
    "SentenceEncoder.intermediate_dim": 2048,
    "SentenceEncoder.pooling": ["max", "mean", "first", "attention"],
    "SentenceEncoder.pooled_dim": 500,
    "BidirectionalDualEncoder.scoring": "dot",
    "BidirectionalDualEncoder.scale": 1.0,
    "BidirectionalDualEncoder.margin": 0.3,
    "BidirectionalDualEncoder.bidirectional": True,
    "BidirectionalDualEncoder.num_hard_negatives": 5,
    "BidirectionalDualEncoder.length_penalty": 11.0,
    "make_optimizer.name": "sgd",
    "make_optimizer.learning_rate": 0.003,
    "make_optimizer.momentum": 0.0,
}


def test_bide_paper_gin_pins_the_papers_values(clean_gin):
    parse_config([f"{REPO}/configs/bide_paper.gin"], [])
    assert {name: gin.query_parameter(name) for name in PAPER} == PAPER
    # 0.003 until step 33M, then 0.0003 (Sec. 4.2).
    step_at, factor = gin.query_parameter("make_optimizer.step_at"), gin.query_parameter("make_optimizer.step_factor")
    assert round(step_at * PAPER["train.num_steps"]) == 33_000_000
    assert factor * PAPER["make_optimizer.learning_rate"] == pytest.approx(0.0003)
