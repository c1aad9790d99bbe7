import json

import keras
import tensorflow as tf

from tf_msemb.data.labeled_pairs import make_labeled_dataset
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
