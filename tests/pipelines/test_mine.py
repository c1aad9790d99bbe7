"""tf_msemb.pipelines.mine under 2 worker processes: the pairs and scores of mining on one machine, resumable."""

import glob
import os
import subprocess
import sys

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.util import BeamAssertException
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
import pytest

from tests.pipelines.conftest import WORKER_ARGS
from tf_msemb.evaluation import mining
from tf_msemb.mining import approximate
from tf_msemb.mining import selection
from tf_msemb.mining import sharded
from tf_msemb.pipelines import encode
from tf_msemb.pipelines.mine import MineBitext
from tf_msemb.pipelines.mine import SelectMaxInRounds
from tf_msemb.pipelines.beam_io import pipeline_options
from tf_msemb.text_files import CorpusError


def _unit(a):
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


def _pools(seed=0, n_x=420, n_y=380, translated=260, dim=24):
    """Sources, and targets of which `translated` are noisy copies of sources (others distractors), as texts too."""
    rng = np.random.default_rng(seed)
    x = _unit(rng.normal(size=(n_x, dim)))
    y = _unit(np.concatenate([x[:translated] + rng.normal(scale=0.35, size=(translated, dim)),
                              rng.normal(size=(n_y - translated, dim))])[rng.permutation(n_y)])
    return (x, [f"src {i}" for i in range(n_x)]), (y, [f"tgt {i}" for i in range(n_y)])


def _encoded(directory, vectors, texts, num_shards):
    """An encode pipeline's output for `vectors` (row i has id i and text i), `num_shards` shards (some may be empty)."""
    os.makedirs(directory)
    for shard in range(num_shards):
        rows = [i for i in range(len(texts)) if i % num_shards == shard]
        encode.write_shard(os.path.join(directory, encode.shard_name(shard, num_shards)), rows,
                           vectors[rows].reshape(len(rows), vectors.shape[1]), [texts[i] for i in rows])
    encode.write_manifest(directory, {"shards": [encode.shard_name(s, num_shards) for s in range(num_shards)],
                                      "sentences": len(texts), "dim": vectors.shape[1], "dtype": "float32"})
    return str(directory)


def _mined(path):
    rows = [line.split("\t") for line in open(path, encoding="utf-8").read().splitlines()]
    return {(src, tgt): float(score) for score, src, tgt in rows}, [float(r[0]) for r in rows]


def _run(options, src, tgt, output, counted=None, **kwargs):
    """The mined pairs and scores; with `counted`, also the pipeline's `tf_msemb.mine` counter of that name."""
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | MineBitext(src, tgt, str(output), **kwargs)
    result = pipeline.run()
    result.wait_until_finish()
    if counted is None:
        return _mined(output)
    counters = result.metrics().query(MetricsFilter().with_name(counted))["counters"]
    return _mined(output), sum(counter.attempted for counter in counters)


def _one_sided_threshold(x, y):
    """A threshold for `rescore_one_sided` that some pair's forward score meets and its backward one does not."""
    forward, backward = mining.margin_candidates(x, y, 4, "rescore_one_sided")
    backward = {(i, j): s for s, i, j in backward}
    split = [(s, backward[i, j]) for s, i, j in forward if (i, j) in backward and backward[i, j] < s]
    assert split
    return (split[len(split) // 2][0] + split[len(split) // 2][1]) / 2


@pytest.mark.slow
@pytest.mark.parametrize("selection, threshold, margin", [("max", None, "ratio"), ("intersect", 1.05, "ratio"),
                                                          ("intersect", "split", "rescore_one_sided")])
def test_exact_blocks_mine_the_pairs_and_scores_of_one_machine(tmp_path, beam_options, selection, threshold, margin):
    (x, src), (y, tgt) = _pools()
    if threshold == "split":  # thresholding backward candidates too would lose pairs here
        threshold = _one_sided_threshold(x, y)
    # 3 x 4 blocks of unequal shards.
    src_dir = _encoded(tmp_path / "x", x, src, 3)
    tgt_dir = _encoded(tmp_path / "y", y, tgt, 4)
    mined, scores = _run(beam_options, src_dir, tgt_dir, tmp_path / "mined.tsv", k=4, selection=selection,
                         threshold=threshold, margin=margin)
    expected = mining.mine(x, y, 4, margin, selection, threshold)
    assert scores == sorted(scores, reverse=True) and len(mined) == len(expected) > 40
    assert mined.keys() == {(src[i], tgt[j]) for _, i, j in expected}
    for score, i, j in expected:
        assert mined[src[i], tgt[j]] == pytest.approx(score, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("codes", [None, "binary"])
def test_empty_shards_and_shards_smaller_than_k(tmp_path, beam_options, codes):
    (x, src), (y, tgt) = _pools(n_x=3, n_y=120, translated=3)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 5), _encoded(tmp_path / "y", y, tgt, 2)  # 2 empty x shards
    mined, _ = _run(beam_options, src_dir, tgt_dir, tmp_path / "m.tsv", codes=codes, cells=1, candidates=200)
    expected = mining.mine(x, y, 4, "ratio", "max")
    assert mined == pytest.approx({(src[i], tgt[j]): s for s, i, j in expected}, abs=1e-5)


def _one_machine(tmp_path, x, y, num_shards, plan):
    """`mining.sharded.MiningRun` on the encode shards (`id % shards`) with the pipeline's plan."""
    shards = {side: [np.arange(s, len(pool), n) for s in range(n)]
              for side, pool, n in (("x", x, num_shards[0]), ("y", y, num_shards[1]))}
    run = sharded.MiningRun(x, y, str(tmp_path / "one-machine"), {"x": plan, "y": plan}, shards=shards)
    return run.pairs("max")


@pytest.mark.parametrize("codes", ["binary", pytest.param("int4", marks=pytest.mark.slow)])
def test_codes_mine_what_one_machine_mines_with_the_same_index(tmp_path, beam_options, codes):
    """Few cells probed and few candidates re-scored: approximate pairs, the same on 2 workers as on one machine."""
    (x, src), (y, tgt) = _pools(seed=2, n_x=900, n_y=800, translated=600)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 3)
    output = tmp_path / "few.tsv"
    mined, _ = _run(beam_options, src_dir, tgt_dir, output, codes=codes, cells=16, probes=2, candidates=4)
    plan = approximate.SearchPlan(codes, cells=16, probes=2, candidates=4, train_size=640)
    scores, xs, ys = _one_machine(tmp_path, x, y, (2, 3), plan)
    expected = {(src[i], tgt[j]): s for s, i, j in zip(scores.tolist(), xs.tolist(), ys.tolist())}
    assert len(expected.keys() - {(src[i], tgt[j]) for _, i, j in mining.mine(x, y, 4, "ratio", "max")}) > 10
    assert mined.keys() == expected.keys()
    assert all(mined[pair] == pytest.approx(score, abs=1e-5) for pair, score in expected.items())
    assert not os.path.exists(f"{output}.work")


@pytest.mark.slow
def test_codes_probing_every_cell_and_rescoring_every_candidate_mine_exactly(tmp_path, beam_options):
    (x, src), (y, tgt) = _pools(seed=1)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 3)
    expected = {(src[i], tgt[j]): s for s, i, j in mining.mine(x, y, 4, "ratio", "max")}
    mined, _ = _run(beam_options, src_dir, tgt_dir, tmp_path / "all.tsv", codes="binary", cells=8, probes=8,
                    candidates=400)
    assert mined.keys() == expected.keys()
    assert all(mined[pair] == pytest.approx(score, abs=1e-5) for pair, score in expected.items())


def test_max_selection_needs_rounds_and_says_when_it_needs_more(tmp_path, beam_options):
    (x, src), (y, tgt) = _pools()
    forward, backward = (tuple(np.asarray(column) for column in zip(*found))
                         for found in mining.margin_candidates(x, y, 4, "ratio"))
    _, rounds = selection.select_max_in_rounds(forward, backward)
    assert rounds >= 3  # the one-machine equality tests above take more than one round here
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 2)
    output = tmp_path / "m.tsv"
    with pytest.raises(Exception, match=r"\d+ candidate pairs are still undecided after 2 selection rounds: rerun "
                                         r"with --rounds=4"):
        _run(beam_options, src_dir, tgt_dir, output, rounds=2)
    assert not output.exists() and os.path.exists(f"{output}.work")
    assert len(glob.glob(f"{output}.work/knn.*")) == 8  # 2 x 2 blocks, both ways
    (mined, _), scored = _run(beam_options, src_dir, tgt_dir, output, "block_scores", rounds=rounds)
    assert scored == 0  # resumed: no block scored again
    assert mined.keys() == {(src[i], tgt[j]) for _, i, j in mining.mine(x, y, 4, "ratio", "max")}


@pytest.mark.slow
def _check_selection(edges, num_shards, rounds, expected_kept, undecided_check):
    """Runs `SelectMaxInRounds` on candidate batches in an in-process pipeline and checks what it keeps."""
    def undecided_is(actual):
        if len(actual) != 1 or not undecided_check(actual[0]):
            raise BeamAssertException(f"undecided: {actual}")

    with beam.Pipeline(options=pipeline_options(["--direct_running_mode=in_memory"])) as pipeline:
        kept, undecided = (pipeline | beam.Create(edges, reshuffle=False)
                           | SelectMaxInRounds(num_shards, rounds))
        if expected_kept is not None:
            pairs = kept | "Pairs" >> beam.FlatMap(lambda batch: zip(*(column.tolist() for column in batch)))
            assert_that(pairs, equal_to(sorted(expected_kept)), label="Kept")
        assert_that(undecided, undecided_is, label="Undecided")


def test_a_round_counts_only_candidates_whose_sentences_are_both_free():
    """x0 keeps y0 in round 1; its candidate y1 -> x0 is settled then too, though it leaves only on x0's shard."""
    edges = [(np.array([2.0]), np.array([0]), np.array([0])), (np.array([1.5]), np.array([0]), np.array([1]))]
    _check_selection(edges, {"x": 2, "y": 2}, 1, [(2.0, 0, 0)], lambda count: count == 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_keyed_rounds_select_what_greedy_selects(seed):
    rng = np.random.default_rng(seed)
    n = 300
    hubs = rng.integers(0, 12, n)  # many sentences name a few hubs: later rounds are needed
    forward = (rng.random(n), np.arange(n) * 7, np.where(rng.random(n) < 0.5, hubs, rng.integers(0, n, n)) * 5)
    backward = (rng.random(n), np.where(rng.random(n) < 0.5, hubs, rng.integers(0, n, n)) * 7, np.arange(n) * 5)
    expected, rounds = selection.select_max_in_rounds(forward, backward)
    assert rounds > 2
    batches = [tuple(column[start : start + 40] for column in direction) for direction in (forward, backward)
               for start in range(0, n, 40)]
    _check_selection(batches, {"x": 3, "y": 4}, rounds, list(zip(*(column.tolist() for column in expected))),
                     lambda count: count == 0)
    _check_selection(batches, {"x": 3, "y": 4}, rounds - 1, None, lambda count: count > 0)


@pytest.mark.slow
def test_a_run_stopped_between_shards_resumes_to_the_uninterrupted_result(tmp_path, beam_options):
    """A column fails (its k-NN file's name is taken by a directory); the rerun redoes only what is missing."""
    (x, src), (y, tgt) = _pools(seed=3)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 3)
    options = {"codes": "binary", "cells": 8, "probes": 2, "candidates": 8}
    (uninterrupted, _), searched = _run(beam_options, src_dir, tgt_dir, tmp_path / "whole.tsv", "queries", **options)
    assert searched == 3 * len(x) + 2 * len(y)  # each query shard by each pool shard
    output = tmp_path / "m.tsv"
    MineBitext(src_dir, tgt_dir, str(output), **options)  # the work directory, its settings recorded
    blocker = tmp_path / "m.tsv.work" / "knn.x.00001.00002.npz"
    blocker.mkdir()
    with pytest.raises(Exception):
        _run(beam_options, src_dir, tgt_dir, output, **options)
    blocker.rmdir()
    finished = {os.path.basename(path) for path in glob.glob(f"{output}.work/*")}
    assert {"index.x.trained.faiss", "index.y.trained.faiss", "cells.x.00001.npz"} <= finished
    blocks = [name for name in finished if name.startswith("knn.")]
    assert blocks and "knn.x.00001.00002.npz" not in finished
    (resumed, _), searched = _run(beam_options, src_dir, tgt_dir, output, "queries", **options)
    assert resumed == uninterrupted
    done_before = sum(len(x[int(name.split(".")[2])::2]) if name.startswith("knn.x") else
                      len(y[int(name.split(".")[2])::3]) for name in blocks)
    assert searched == 3 * len(x) + 2 * len(y) - done_before  # only the blocks missing were searched
    assert not os.path.exists(f"{output}.work")


def test_a_work_dir_of_other_settings_or_other_files_is_refused(tmp_path):
    (x, src), (y, tgt) = _pools(n_x=60, n_y=50, translated=40)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 2)
    MineBitext(src_dir, tgt_dir, str(tmp_path / "m.tsv"), codes="binary")
    with pytest.raises(CorpusError, match=r"m.tsv.work holds a mining run with other corpora or search settings"):
        MineBitext(src_dir, tgt_dir, str(tmp_path / "m.tsv"), codes="int8")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")  # removed with the work dir if adopted
    with pytest.raises(CorpusError, match=r"mine is not empty and holds no mining run"):
        MineBitext(src_dir, tgt_dir, str(tmp_path / "n.tsv"), work_dir=str(tmp_path / "mine"))


@pytest.mark.slow
def test_the_command_line_prints_a_line_per_stage_and_one_error_line(tmp_path):
    (x, src), (y, tgt) = _pools(n_x=60, n_y=50, translated=40)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 2)
    command = [sys.executable, "-m", "tf_msemb.pipelines.mine", f"--tgt={tgt_dir}", *WORKER_ARGS]
    done = subprocess.run([*command, f"--src={src_dir}", f"--output={tmp_path / 'm.tsv'}"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for line in ("[pipeline] knn: 4 shards", "[pipeline] select: ", f"Mined pairs: {tmp_path / 'm.tsv'}"):
        assert line in done.stdout
    assert _mined(tmp_path / "m.tsv")[0].keys() == {(src[i], tgt[j]) for _, i, j in mining.mine(x, y)}
    done = subprocess.run([*command, f"--src={tmp_path}", f"--output={tmp_path / 'n.tsv'}"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (f"error: No encoded.json in {tmp_path}: is it the output_dir of "
                                                    "tf_msemb.pipelines.encode?")


def test_identical_vectors_in_other_shards_resolve_as_on_one_machine(tmp_path, beam_options):
    """Two lines that tokenize alike get one vector; one machine ranks them by index, the pipeline by id."""
    (x, src), (y, tgt) = _pools(seed=2, n_x=200, n_y=180, translated=150)
    y[100:140] = y[60:100]  # 40 targets duplicated 40 rows later: another shard of 3 for most
    mined, _ = _run(beam_options, _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 3),
                    tmp_path / "m.tsv")
    expected = {(src[i], tgt[j]): s for s, i, j in mining.mine(x, y, 4, "ratio", "max")}
    assert mined.keys() == expected.keys()
