import json
import re

import numpy as np
import pytest

from conftest import REPO
from conftest import run
from mining.pools import clustered_pools
from tf_msemb.mining import synthetic


@pytest.mark.slow  # a benchmark tool's report, not the package's behaviour: about a minute
def test_searching_only_the_sample_gives_the_recall_of_the_whole_run(tmp_path):
    x, y, pairs = clustered_pools(n_x=1500, n_y=1500)
    pools = tmp_path / "pools"
    pools.mkdir()
    for name, array in (("x", x), ("y", y), ("pairs", pairs)):
        np.save(pools / f"{name}.npy", array)
    (pools / "pools.json").write_text(json.dumps({"size": 1500}))
    # Few cells probed and few candidates: an index that loses neighbours, so recall is below 100 %.
    common = [f"{REPO}/tools/benchmarks/bench_scale_mining.py", f"--pools={pools}", "--codes=binary", "--cells=32",
              "--probes=2", "--candidates=4", "--sample=300", "--shard_size=600"]
    rows = []
    for extra in ([], ["--sample_search"]):
        out = run([*common, *extra], tmp_path)
        rows.append(re.findall(r"\| ([\d.]+) \((\d+)\) \| ([\d.]+) \((\d+)\) \|", out))
        assert len(rows[-1]) == 1, out
    assert rows[0] == rows[1]
    forward, _, backward, _ = map(float, rows[0][0])
    assert min(forward, backward) < 100


@pytest.mark.slow  # a benchmark tool's report: about 20 s
def test_cell_recall_grows_with_the_cells_probed_and_is_whole_when_all_are(tmp_path):
    rng = np.random.default_rng(0)
    x = synthetic.unit(rng.standard_normal((1500, 64)))
    # Partners at cosine ~0.7: often not in the query's own cell among 256.
    y = synthetic.unit(np.concatenate([x[:800] + synthetic.unit(rng.standard_normal((800, 64))),
                                       rng.standard_normal((700, 64))]))
    position = rng.permutation(1500)
    shuffled = np.empty_like(y)
    shuffled[position] = y
    pools = tmp_path / "pools"
    pools.mkdir()
    for name, array in (("x", x.astype(np.float16)), ("y", shuffled.astype(np.float16)),
                        ("pairs", np.stack([np.arange(800), position[:800]], axis=1))):
        np.save(pools / f"{name}.npy", array)
    (pools / "pools.json").write_text(json.dumps({"size": 1500}))
    out = run([f"{REPO}/tools/benchmarks/bench_scale_mining.py", f"--pools={pools}", "--sample=300", "--cell_recall",
               "--cell_counts=8", "--cell_counts=256"], tmp_path)
    rows = {(cells, direction): [float(share) for share in shares.split(" / ")]
            for cells, direction, shares in re.findall(r"^\| 1,500 \| (\d+) \| (\w+) \(\d+\) \| \d+ \| ([\d. /]+) \|$",
                                                        out, flags=re.M)}
    assert len(rows) == 4, out
    for shares in rows.values():
        assert shares == sorted(shares) and shares[-1] == 100  # every cell probed finds every partner
    assert rows[("8", "forward")][0] == 100  # 16 probes of 8 cells: all of them
    assert min(rows[("256", "forward")][0], rows[("256", "backward")][0]) < 100
