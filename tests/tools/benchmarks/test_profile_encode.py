import re

import pytest

from conftest import REPO
from conftest import corpus_file
from conftest import run

pytestmark = pytest.mark.slow  # a benchmark tool's report, not the package's behaviour: about 55 s


def _profile(tmp_path, *args):
    out = run([f"{REPO}/tools/benchmarks/profile_encode.py", f"--input={corpus_file('train', 'en')}", "--limit=96",
               "--batch_size=32", *args], tmp_path)
    stages = dict(re.findall(r"^(tokenize|encode)\s+([\d.]+)\s+[\d.]+%$", out, flags=re.M))
    padding = float(re.search(r"^padding: ([\d.]+)% of (\d+) token positions", out, flags=re.M).group(1))
    assert set(stages) == {"tokenize", "encode"} and all(float(v) > 0 for v in stages.values()), out
    return padding


def test_sorting_and_sub_batches_cut_the_padding_it_reports(tmp_path):
    given = _profile(tmp_path)
    sub_batched = _profile(tmp_path, "--sub_batch_size=8")
    assert sub_batched < given
    assert _profile(tmp_path, "--order=sorted") < given


def test_packed_encoding_has_no_padding_outside_attention(tmp_path):
    assert _profile(tmp_path, "--packed") == 0.0 < _profile(tmp_path)
