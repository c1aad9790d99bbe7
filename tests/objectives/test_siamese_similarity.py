import json

import keras
import pytest
import tensorflow as tf

from tf_msemb.data.labeled_pairs import make_labeled_dataset
from tf_msemb.losses.siamese import cosent_loss
from tf_msemb.losses.siamese import cosine_mse_loss
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.siamese_similarity import SiameseSimilarity

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, max_sequence_length=48, dropout=0.0)


def _train(model, dataset, steps):
    model.build()
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    model.optimizer.build(model.trainable_variables)
    step = tf.function(model.train_step, reduce_retracing=True)
    data = iter(dataset)
    return [step(next(data)) for _ in range(steps)]


def test_sts_regression_learns_identical_vs_unrelated(tokenizer, tmp_path):
    rows = []
    words = ["Der Hund", "Die Katze", "Das Kind", "Der Mann", "Die Frau", "Der Bauer"]
    for i, a in enumerate(words):
        rows.append(f"g\tf\t0\t{i}\t5.0\t{a} schläft.\t{a} schläft.\n")
        rows.append(f"g\tf\t0\t{i}\t0.0\t{a} schläft.\tThe stock market fell sharply today.\n")
    path = tmp_path / "sts.tsv"
    path.write_text("".join(rows))
    # Seeded: unseeded, the initialization depended on the tests run before it in the worker, and one in three
    # runs of tests/objectives failed once. Seeds 0-11 end at 0.04-0.17 of the first loss.
    keras.utils.set_random_seed(0)
    model = SiameseSimilarity(SentenceEncoder(tokenizer.vocabulary_size, **TINY), task="sts")
    logs = _train(model, make_labeled_dataset(str(path), tokenizer, 12), 40)
    assert float(logs[-1]["loss"]) < 0.5 * float(logs[0]["loss"])


def _graded_pairs(tmp_path):
    rows = [f"g\tf\t0\t{i}\t{score}\tDer Hund schläft.\t{other}\n" for i, (score, other) in enumerate(
        [(5.0, "Der Hund schläft."), (3.5, "Der Hund schläft fest."), (2.0, "Die Katze schläft."),
         (0.5, "Das Kind spielt."), (0.0, "The stock market fell sharply today."), (4.0, "Ein Hund schläft.")])]
    path = tmp_path / "graded.tsv"
    path.write_text("".join(rows))
    return str(path)


def test_sts_loss_cosent_is_the_loss_trained(tokenizer, tmp_path):
    """The step's loss is CoSENT's on the batch (not the regression's), and CoSENT training orders the pairs."""
    keras.utils.set_random_seed(0)
    model = SiameseSimilarity(SentenceEncoder(tokenizer.vocabulary_size, **TINY), task="sts", sts_loss="cosent")
    dataset = make_labeled_dataset(_graded_pairs(tmp_path), tokenizer, 6, shuffle_buffer=0)
    batch = next(iter(dataset))
    model.build()
    u, v = model.encoder(batch["a"]), model.encoder(batch["b"])
    expected, regression = cosent_loss(u, v, batch["target"]), cosine_mse_loss(u, v, batch["target"])
    assert abs(float(expected) - float(regression)) > 0.1
    logs = _train(model, dataset, 60)
    assert float(logs[0]["loss"]) == pytest.approx(float(expected), rel=1e-4)
    assert float(logs[-1]["loss"]) < 0.5 * float(logs[0]["loss"])


def test_unknown_sts_loss_is_refused(tokenizer):
    with pytest.raises(ValueError, match="sts_loss"):
        SiameseSimilarity(SentenceEncoder(tokenizer.vocabulary_size, **TINY), sts_loss="cosine")


def test_nli_classifier_trains(tokenizer, tmp_path):
    labels = ["entailment", "contradiction"]
    rows = [{"sentence1": f"Satz {i}", "sentence2": "ja" if i % 2 == 0 else "nein", "gold_label": labels[i % 2]}
            for i in range(16)]
    path = tmp_path / "nli.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    keras.utils.set_random_seed(0)  # as above: the initialization would depend on the tests run before
    model = SiameseSimilarity(SentenceEncoder(tokenizer.vocabulary_size, **TINY), task="nli")
    logs = _train(model, make_labeled_dataset(str(path), tokenizer, 8, format="nli_jsonl"), 40)
    assert float(logs[-1]["accuracy"]) > 0.9
    assert model.classifier.kernel.shape == (48, 3)
