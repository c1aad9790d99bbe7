"""tf_msemb.pipelines.mine under 2 worker processes: the pairs and scores of evaluation.mining on one machine."""

import os
import subprocess
import sys

import apache_beam as beam
import numpy as np
import pytest

from tests.pipelines.conftest import WORKER_ARGS
from tf_msemb.evaluation import mining
from tf_msemb.evaluation import search
from tf_msemb.pipelines import encode
from tf_msemb.pipelines.mine import MineBitext


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


def _run(options, src, tgt, output, **kwargs):
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | MineBitext(src, tgt, str(output), **kwargs)
    pipeline.run().wait_until_finish()
    return _mined(output)


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
@pytest.mark.parametrize("index", ["exact", "ivf"])
def test_empty_shards_and_shards_smaller_than_k(tmp_path, beam_options, index):
    (x, src), (y, tgt) = _pools(n_x=3, n_y=120, translated=3)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 5), _encoded(tmp_path / "y", y, tgt, 2)  # 2 empty x shards
    mined, _ = _run(beam_options, src_dir, tgt_dir, tmp_path / "m.tsv", index=index, nlist=1, nprobe=1)
    expected = mining.mine(x, y, 4, "ratio", "max")
    assert mined == pytest.approx({(src[i], tgt[j]): s for s, i, j in expected}, abs=1e-5)


@pytest.mark.slow
def test_ivf_probing_every_cell_is_exact_and_few_cells_keep_most_pairs(tmp_path, beam_options):
    (x, src), (y, tgt) = _pools(seed=1)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 3)
    expected = {(src[i], tgt[j]): s for s, i, j in mining.mine(x, y, 4, "ratio", "max")}
    every, _ = _run(beam_options, src_dir, tgt_dir, tmp_path / "all.tsv", index="ivf", nlist=8, nprobe=8)
    assert every.keys() == expected.keys()
    assert all(every[pair] == pytest.approx(score, abs=1e-5) for pair, score in expected.items())
    few, _ = _run(beam_options, src_dir, tgt_dir, tmp_path / "few.tsv", index="ivf", nlist=8, nprobe=2)
    assert few != every and len(few.keys() & expected.keys()) >= 0.6 * len(expected)


def _one_machine_ivf(x, y, num_shards, nlist, nprobe):
    """One machine's IVF mining with the pipeline's cells: each side's trained on all its vectors in shard order."""
    def knn(queries, pool, shards):
        index = search.trained_ivf(np.concatenate([pool[s::shards] for s in range(shards)]), len(pool), nlist)
        index.add(pool)
        return search.search_index(index, queries, 4, nprobe=nprobe)

    return mining.select(*mining.candidates_from_knn(knn(x, y, num_shards[1]), knn(y, x, num_shards[0])), "max")


def test_ivf_with_few_cells_mines_what_one_index_with_the_same_cells_mines(tmp_path, beam_options):
    """Each query's cells are probed once, in the other side's quantizer, and serve every pool shard."""
    (x, src), (y, tgt) = _pools(seed=2)
    src_dir, tgt_dir = _encoded(tmp_path / "x", x, src, 2), _encoded(tmp_path / "y", y, tgt, 3)
    output = tmp_path / "few.tsv"
    mined, _ = _run(beam_options, src_dir, tgt_dir, output, index="ivf", nlist=8, nprobe=2, sample=len(x))
    expected = {(src[i], tgt[j]): s for s, i, j in _one_machine_ivf(x, y, (2, 3), nlist=8, nprobe=2)}
    assert expected.keys() != {(src[i], tgt[j]) for _, i, j in mining.mine(x, y, 4, "ratio", "max")}
    assert mined.keys() == expected.keys()
    assert all(mined[pair] == pytest.approx(score, abs=1e-5) for pair, score in expected.items())
    assert not os.path.exists(f"{output}.cells")


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
