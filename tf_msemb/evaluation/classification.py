"""Zero-shot cross-lingual classification (MLDoc / Amazon reviews style).

A small MLP is trained on frozen embeddings of language A and tested, as it
is, on language B: the score measures how well the embedding space aligns
languages, not how well the classifier is tuned. Results are the mean and
standard deviation over several seeds.
"""

import gin
import keras
import numpy as np

from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.evaluator import named_files
from tf_msemb.evaluation.evaluator import path_list
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines


def read_labeled_texts(path):
    """`label<TAB>text` lines -> `(labels, texts)`."""
    labels, texts = [], []
    for number, line in enumerate(read_lines(path), start=1):
        label, sep, text = line.partition("\t")
        if not sep or not label:
            raise CorpusError(f"{path}:{number}: expected label<TAB>text.")
        labels.append(label)
        texts.append(text)
    return labels, texts


def make_classifier(num_classes, hidden_units=256, dropout=0.2, seed=0):
    """One hidden ReLU layer with dropout, softmax over `num_classes`; initializers and dropout seeded by `seed`."""
    return keras.Sequential(
        [
            keras.layers.Dense(hidden_units, activation="relu",
                               kernel_initializer=keras.initializers.GlorotUniform(seed=seed)),
            keras.layers.Dropout(dropout, seed=seed),
            keras.layers.Dense(num_classes, activation="softmax",
                               kernel_initializer=keras.initializers.GlorotUniform(seed=seed + 1)),
        ]
    )


def zero_shot_transfer(train, tests, seeds=(0, 1, 2, 3, 4), hidden_units=256, dropout=0.2, epochs=30,
                       batch_size=32, learning_rate=1e-3):
    """Trains on `train` and scores each of `tests`, once per seed.

    `train` is `(embeddings [n, d], labels)` and `tests` is
    `{name: (embeddings, labels)}`; labels are strings. Returns
    `{name: {"accuracy": mean, "std": std over seeds, "size": n}}`. Each
    seed drives its own initializers, dropout and epoch order, and no global
    random state is touched (this runs inside training as a dev evaluator).
    """
    classes = sorted(set(train[1]))
    index = {label: i for i, label in enumerate(classes)}
    for name, (_, labels) in tests.items():
        unseen = sorted(set(labels) - set(classes))
        if unseen:
            raise CorpusError(f"Test set {name} has labels never seen in training: {unseen[:5]}.")
    train_x, train_y = np.asarray(train[0], np.float32), np.array([index[y] for y in train[1]])
    accuracies = {name: [] for name in tests}
    for seed in seeds:
        model = make_classifier(len(classes), hidden_units, dropout, seed)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="sparse_categorical_crossentropy")
        order = np.random.default_rng(seed)
        for _ in range(epochs):
            shuffled = order.permutation(len(train_y))
            model.fit(train_x[shuffled], train_y[shuffled], batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
        for name, (x, labels) in tests.items():
            predicted = np.argmax(keras.ops.convert_to_numpy(model(np.asarray(x, np.float32))), axis=1)
            accuracies[name].append(float(np.mean(predicted == [index[y] for y in labels])))
    return {
        name: {"accuracy": float(np.mean(a)), "std": float(np.std(a)), "size": len(tests[name][1])}
        for name, a in accuracies.items()
    }


@gin.configurable(module="tf_msemb.evaluation")
class ZeroShotClassification(Evaluator):
    """Zero-shot cross-lingual transfer: an MLP trained on language A's embeddings, tested on language B's.

    Args:
        train: `label<TAB>text` file of language A.
        tests: `label<TAB>text` files of other languages (a set each, named by file).
        seeds: classifier trainings, with seeds 0 .. seeds-1.
        name: the metric prefix.

    Rows with `accuracy` (mean over seeds, in [0, 1]) and its `std` over seeds.
    """

    def __init__(self, train, tests, seeds=5, name="classify"):
        self.name, self.seeds = name, tuple(range(seeds))
        self.train = read_labeled_texts(train)
        files = [(path,) for path in path_list(tests)]
        self.tests = {name: read_labeled_texts(path)
                      for name, (path,) in named_files(files, ("test",), "ZeroShotClassification.tests")}

    def evaluate(self, embed):
        labels, texts = self.train
        train = (embed(texts), labels)
        tests = {name: (embed(test_texts), test_labels) for name, (test_labels, test_texts) in self.tests.items()}
        return zero_shot_transfer(train, tests, seeds=self.seeds)
