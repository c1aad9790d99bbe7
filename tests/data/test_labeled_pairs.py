import json

import numpy as np
import pytest

from tf_msemb.data.labeled_pairs import make_labeled_dataset
from tf_msemb.data.labeled_pairs import read_nli_jsonl
from tf_msemb.data.text_files import CorpusError


def _nli(tmp_path):
    rows = [
        {"sentence1": "A man plays.", "sentence2": "A person plays.", "gold_label": "entailment"},
        {"sentence1": "A man plays.", "sentence2": "Nobody plays.", "gold_label": "contradiction"},
        {"sentence1": "A man plays.", "sentence2": "He is happy.", "gold_label": "neutral"},
        {"sentence1": "A man plays.", "sentence2": "Unclear.", "gold_label": "-"},
    ]
    path = tmp_path / "nli.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_nli_jsonl(tmp_path):
    first, second, labels = read_nli_jsonl(_nli(tmp_path))
    assert second == ["A person plays.", "Nobody plays.", "He is happy."] and list(labels) == [0, 2, 1]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sentence1": "x"}\n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:1"):
        read_nli_jsonl(str(bad))


def test_sts_batches_scale_scores(tokenizer, tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("".join(f"g\tf\t2012\t{i}\t{i % 6}.0\tDer Mann {i}.\tThe man {i}.\n" for i in range(12)))
    batch = next(iter(make_labeled_dataset(str(path), tokenizer, 12, shuffle_buffer=0)))
    np.testing.assert_allclose(batch["target"].numpy(), [(i % 6) / 5 for i in range(12)], rtol=1e-6)
    assert batch["a"]["token_ids"].shape[0] == 12 and batch["b"]["padding_mask"].dtype.name == "bool"
    with pytest.raises(ValueError, match="Unknown labeled-pair format"):
        make_labeled_dataset(str(path), tokenizer, 2, format="xml")
