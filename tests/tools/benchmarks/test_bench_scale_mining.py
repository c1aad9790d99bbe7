import json
import re

import numpy as np
import pytest

from conftest import REPO
from conftest import run
from mining.pools import clustered_pools


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
