import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tf_msemb.evaluation import mining
from tf_msemb.mining import approximate
from tf_msemb.mining import sharded
from mining.pools import clustered_pools

# Every cell probed, every candidate re-scored: the run's k-NN are exact, so its pairs must be exact mining's.
EXHAUSTIVE = approximate.SearchPlan("int8", cells=8, probes=8, candidates=16, train_size=1300)


def _run(tmp_path, name="run", **options):
    x, y, _ = clustered_pools()
    return sharded.MiningRun(x, y, str(tmp_path / name), {"x": EXHAUSTIVE, "y": EXHAUSTIVE}, shard_size=400,
                             **options)


@pytest.mark.parametrize("selection", mining.SELECTIONS)
def test_sharded_run_mines_what_exact_mining_mines(tmp_path, selection):
    x, y, planted = clustered_pools()
    scores, xs, ys = _run(tmp_path).pairs(selection, threshold=1.0)
    expected = mining.mine(x.astype(np.float32), y.astype(np.float32), k=4, selection=selection, threshold=1.0)
    assert list(zip(xs.tolist(), ys.tolist())) == [(i, j) for _, i, j in expected]
    np.testing.assert_allclose(scores, [score for score, _, _ in expected], rtol=1e-5)
    assert len(set(zip(xs.tolist(), ys.tolist())) & set(map(tuple, planted.tolist()))) > 0.8 * len(planted)


KILLER = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [{tests!r}]
    from tf_msemb.mining import sharded
    from mining.pools import clustered_pools
    from mining.test_sharded import EXHAUSTIVE

    saved = sharded.write_npz_atomically
    def save_then_die(path, **arrays):
        saved(path, **arrays)
        if os.path.basename(path) == "knn.x.00001.npz":
            os._exit(9)  # killed between the second and third query shard
    sharded.write_npz_atomically = save_then_die
    x, y, _ = clustered_pools()
    sharded.MiningRun(x, y, {work_dir!r}, {{"x": EXHAUSTIVE, "y": EXHAUSTIVE}}, shard_size=400).pairs()
""")


def test_a_run_killed_between_shards_resumes_to_the_uninterrupted_result(tmp_path):
    work_dir = tmp_path / "killed"
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    killed = subprocess.run([sys.executable, "-c", KILLER.format(tests=tests, work_dir=str(work_dir))],
                            capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr[-2000:]
    finished = sorted(name for name in os.listdir(work_dir) if not name.endswith(".partial"))
    assert "knn.x.00001.npz" in finished and "knn.x.00002.npz" not in finished and "candidates.npz" not in finished
    first_shard = os.stat(work_dir / "knn.x.00000.npz")
    resumed = _run(tmp_path, "killed").pairs()
    assert os.stat(work_dir / "knn.x.00000.npz").st_mtime_ns == first_shard.st_mtime_ns  # not searched again
    uninterrupted = _run(tmp_path, "whole").pairs()
    for got, expected in zip(resumed, uninterrupted):
        np.testing.assert_array_equal(got, expected)


def test_a_work_dir_of_another_run_is_refused(tmp_path):
    _run(tmp_path)
    with pytest.raises(ValueError, match="holds a mining run with other settings"):
        _run(tmp_path, k=3)


@pytest.mark.parametrize("codes", ["binary", "pq"])
def test_a_pool_searched_shard_by_shard_proposes_candidates_from_every_shard(tmp_path, codes):
    x, y, _ = clustered_pools()
    plan = approximate.SearchPlan(codes, cells=8, probes=4, candidates=16, train_size=1300, pq_bytes=16)
    run = sharded.MiningRun(x, y, str(tmp_path), {"x": plan, "y": plan}, shard_size=400)
    whole = run.trained_index("y")  # the same trained cells and codes, all of y added at once
    approximate.add_vectors(whole, y, np.arange(len(y)))
    one_index = approximate.search(whole, plan, x, y, 4)
    cells = approximate.probed_cells(run.trained_index("y"), plan, x)
    rows = np.arange(len(y))
    # One shard holding the whole pool: the probed cells searched shard-wise are the index's own search.
    for got, expected in zip(approximate.search_shard(whole, plan, x, cells, y, rows, 4), one_index):
        np.testing.assert_array_equal(got, expected)
    sims, found = run.knn("x")
    assert sorted(name for name in os.listdir(tmp_path) if name.startswith("index.y.0")) == [
        f"index.y.{shard:05d}.faiss" for shard in range(4)]
    # Four shards each propose 16: a superset of the one index's 16, so never a worse neighbour, sometimes better.
    assert np.all(sims >= one_index[0] - 1e-6)
    assert np.any(sims > one_index[0] + 1e-6)
    exact = np.einsum("nd,nkd->nk", x.astype(np.float32), y.astype(np.float32)[found])
    np.testing.assert_allclose(sims, exact, atol=1e-6)  # re-scored: exact cosines, not the codes' estimates
