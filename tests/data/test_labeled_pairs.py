import json

import numpy as np
import pytest

from tf_msemb.data.labeled_pairs import make_labeled_dataset
from tf_msemb.data.labeled_pairs import read_labeled_pairs
from tf_msemb.data.labeled_pairs import read_nli_jsonl
from tf_msemb.data.labeled_pairs import read_semeval_sts
from tf_msemb.data.labeled_pairs import semeval_sts_tracks
from tf_msemb.text_files import CorpusError


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


def _semeval(tmp_path, track, pairs, scores):
    (tmp_path / f"STS.input.{track}.txt").write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
    (tmp_path / f"STS.gs.{track}.txt").write_text("".join(f"{s}\n" for s in scores))


def test_semeval_sts_tracks_pair_inputs_with_gold_and_skip_unscored(tmp_path):
    _semeval(tmp_path, "track1.ar-ar", [("a", "b"), ("c", "d"), ("e", "f")], ["4.2", "", "0"])
    _semeval(tmp_path, "track4a.es-en", [("uno", "one")], ["5"])
    tracks = semeval_sts_tracks(str(tmp_path))
    assert list(tracks) == ["track1.ar-ar", "track4a.es-en"]
    first, second, gold = read_semeval_sts(*tracks["track1.ar-ar"])
    assert first == ["a", "e"] and second == ["b", "f"] and list(gold) == [4.2, 0.0]


def test_semeval_sts_errors_name_the_file(tmp_path):
    _semeval(tmp_path, "track2", [("a", "b"), ("c", "d")], ["1"])
    with pytest.raises(CorpusError, match="has 2 lines but .*STS.gs.track2.txt has 1"):
        read_semeval_sts(*semeval_sts_tracks(str(tmp_path))["track2"])
    (tmp_path / "STS.input.track3.txt").write_text("a\tb\n")
    with pytest.raises(CorpusError, match="no gold file .*STS.gs.track3.txt"):
        semeval_sts_tracks(str(tmp_path))
    with pytest.raises(CorpusError, match="directory not found: .*missing"):
        semeval_sts_tracks(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="No STS.input"):
        semeval_sts_tracks(str(tmp_path / "empty"))


def test_sts_batches_scale_scores(tokenizer, tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("".join(f"g\tf\t2012\t{i}\t{i % 6}.0\tDer Mann {i}.\tThe man {i}.\n" for i in range(12)))
    batch = next(iter(make_labeled_dataset(str(path), tokenizer, 12, shuffle_buffer=0)))
    np.testing.assert_allclose(batch["target"].numpy(), [(i % 6) / 5 for i in range(12)], rtol=1e-6)
    assert batch["a"]["token_ids"].shape[0] == 12 and batch["b"]["padding_mask"].dtype.name == "bool"
    with pytest.raises(ValueError, match="Unknown labeled-pair format"):
        make_labeled_dataset(str(path), tokenizer, 2, format="xml")


def test_several_sources_are_one_set(tokenizer, tmp_path):
    """SNLI and MultiNLI together: every pair of both files, in order without shuffling."""
    snli = _nli(tmp_path)
    multinli = tmp_path / "multinli.jsonl"
    multinli.write_text(json.dumps({"sentence1": "It rains.", "sentence2": "It is dry.", "gold_label": "contradiction"})
                        + "\n")
    first, second, labels = read_labeled_pairs([snli, str(multinli)], "nli_jsonl")
    assert second[-1] == "It is dry." and len(first) == 4 and list(labels) == [0, 2, 1, 2]
    batch = next(iter(make_labeled_dataset([snli, str(multinli)], tokenizer, 4, format="nli_jsonl",
                                           shuffle_buffer=0)))
    np.testing.assert_array_equal(batch["target"].numpy(), [0, 2, 1, 2])


def test_exclude_leaves_out_pairs_sharing_either_sentence_with_held_out_files(tokenizer, tmp_path, capsys):
    """A pair goes if its first or its second sentence is in a held-out file (either side there); no other goes."""
    train = tmp_path / "train.csv"
    train.write_text("A dog runs.,A dog is running.,4.0\nA cat sleeps.,The cat naps.,4.5\n"
                     "Two men talk.,A man sings.,1.0\nIt rains.,The sun shines.,0.5\n")
    dev = tmp_path / "dev.csv"
    dev.write_text("The cat naps.,Someone cooks.,3.0\nTwo men talk.,Nobody is here.,0.0\n")
    batch = next(iter(make_labeled_dataset(str(train), tokenizer, 2, format="stsb_csv", exclude=[str(dev)],
                                           shuffle_buffer=0, repeat=False)))
    np.testing.assert_allclose(batch["target"].numpy(), [4.0 / 5, 0.5 / 5], rtol=1e-6)
    assert "2 of 4 pairs left out" in capsys.readouterr().out
    kept = make_labeled_dataset(str(train), tokenizer, 4, format="stsb_csv", shuffle_buffer=0, repeat=False)
    assert next(iter(kept))["target"].shape == [4]
    with pytest.raises(CorpusError, match="exclude leaves no pair"):
        make_labeled_dataset(str(dev), tokenizer, 1, format="stsb_csv", exclude=str(dev))
