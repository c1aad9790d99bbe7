import numpy as np
import pytest

from tf_msemb.text_files import CorpusError
from tf_msemb.evaluation.classification import read_labeled_texts
from tf_msemb.evaluation.classification import zero_shot_transfer


def _language(centers, labels, noise, seed, rotation=None):
    rng = np.random.default_rng(seed)
    x = centers[labels] + noise * rng.standard_normal((len(labels), centers.shape[1]))
    return x if rotation is None else x @ rotation


def test_aligned_language_transfers_and_a_rotated_one_does_not():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((4, 16))
    train_labels = np.repeat(np.arange(4), 30)
    test_labels = np.tile(np.arange(4), 25)
    names = np.array(["sports", "food", "music", "weather"])
    rotation, _ = np.linalg.qr(rng.standard_normal((16, 16)))
    results = zero_shot_transfer(
        (_language(centers, train_labels, 0.3, 1), list(names[train_labels])),
        {
            "aligned": (_language(centers, test_labels, 0.3, 2), list(names[test_labels])),
            "rotated": (_language(centers, test_labels, 0.3, 3, rotation), list(names[test_labels])),
        },
        seeds=(0, 1, 2),
        epochs=20,
    )
    assert results["aligned"]["accuracy"] > 0.95
    assert results["rotated"]["accuracy"] < 0.7
    assert results["aligned"]["size"] == 100
    assert 0.0 <= results["rotated"]["std"] < 0.5


def test_seeds_make_runs_repeatable_and_the_std_is_over_seeds():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 8))
    labels = ["a" if v > 0 else "b" for v in x[:, 0] + 0.8 * rng.standard_normal(40)]
    train, tests = (x[:20], labels[:20]), {"t": (x[20:], labels[20:])}
    first = zero_shot_transfer(train, tests, seeds=(5, 6), epochs=3)
    assert zero_shot_transfer(train, tests, seeds=(5, 6), epochs=3) == first
    single = [zero_shot_transfer(train, tests, seeds=(s,), epochs=3)["t"]["accuracy"] for s in (5, 6)]
    assert first["t"]["accuracy"] == pytest.approx(np.mean(single))
    assert first["t"]["std"] == pytest.approx(np.std(single))


def test_the_global_random_state_is_left_alone():
    """It runs inside training (a dev evaluator), whose random streams must not be reset at each evaluation."""
    x = np.random.default_rng(2).standard_normal((20, 4))
    labels = ["a" if v > 0 else "b" for v in x[:, 0]]
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    zero_shot_transfer((x, labels), {"t": (x, labels)}, seeds=(0,), epochs=1)
    assert np.random.rand() == expected


def test_unseen_test_labels_are_named():
    x = np.eye(3)
    with pytest.raises(CorpusError, match=r"Test set t has labels never seen in training: \['c'\]"):
        zero_shot_transfer((x, ["a", "b", "a"]), {"t": (x, ["a", "c", "b"])}, seeds=(0,), epochs=1)


def test_read_labeled_texts(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("pos\tGreat phone.\nneg\tBroke after a day.\n")
    assert read_labeled_texts(str(path)) == (["pos", "neg"], ["Great phone.", "Broke after a day."])
    path.write_text("pos\tfine\nno label here\n")
    with pytest.raises(CorpusError, match=r"train\.tsv:2: expected label<TAB>text"):
        read_labeled_texts(str(path))
