"""Each evaluator class on a tiny set whose answer is worked out by hand, with an `embed` that looks vectors up."""

import gin
import numpy as np
import pytest

from tf_msemb.evaluation.classification import ZeroShotClassification
from tf_msemb.evaluation.distillation import DistillationMSE
from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.evaluator import flatten
from tf_msemb.evaluation.mining import MiningEvaluator
from tf_msemb.evaluation.retrieval import DocumentRetrieval
from tf_msemb.evaluation.retrieval import PoolRetrieval
from tf_msemb.evaluation.retrieval import TranslationRetrieval
from tf_msemb.evaluation.sts import STSEvaluator
from tf_msemb.text_files import CorpusError
from conftest import needs_bfloat16


def lookup(vectors):
    """An `embed` that maps each string to its hand-made vector, normalized; unknown strings raise KeyError."""

    def embed(sentences):
        rows = np.array([vectors[s] for s in sentences], np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return embed


def circle(degrees):
    return [np.cos(np.radians(degrees)), np.sin(np.radians(degrees))]


def write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


def test_flatten_names_every_value_and_averages_shared_metrics_over_sets():
    per_set = {"a": {"acc": 0.5, "p": 1.0, "size": 10}, "b": {"acc": 1.0, "size": 30}}
    assert flatten("t", per_set) == {"t/a/acc": 0.5, "t/a/p": 1.0, "t/b/acc": 1.0, "t/acc": 0.75}


def test_derived_rows_and_setting_metrics_are_flattened_but_not_averaged():
    per_set = {"a": {"r": 0.2, "cut": 1.0, "size": 1}, "b": {"r": 0.4, "cut": 3.0, "size": 1},
               "joined": {"r": 0.9, "cut": 2.0, "size": 2}}
    flat = flatten("t", per_set, derived_rows=("joined",), setting_metrics=("cut",))
    assert flat["t/r"] == pytest.approx(0.3) and "t/cut" not in flat
    assert flat["t/joined/r"] == 0.9 and flat["t/b/cut"] == 3.0


def test_calling_an_evaluator_flattens_its_rows():
    class Fixed(Evaluator):
        name = "fixed"

        def evaluate(self, embed):
            return {"x": {"m": embed(["q"])[0], "size": 1}}

    assert Fixed()(lambda sentences: [0.25]) == {"fixed/x/m": 0.25, "fixed/m": 0.25}


def test_translation_retrieval_scores_both_directions(tmp_path):
    # Source a, b, c and targets A, B, C; B sits nearer a (cos 0.8) than b (0.6): b->B is right, B->b is not.
    embed = lookup({"a": [1, 0, 0], "b": [0, 1, 0], "c": [0, 0, 1], "A": [1, 0, 0], "B": [0.8, 0.6, 0],
                    "C": [0, 0, 1], "x": [1, 0, 0], "y": [0, 1, 0]})
    hard = (write(tmp_path / "hard.src", "abc"), write(tmp_path / "hard.tgt", "ABC"))
    easy = (write(tmp_path / "easy.src", "xy"), write(tmp_path / "easy.tgt", "xy"))
    evaluator = TranslationRetrieval([hard, easy])
    results = evaluator.evaluate(embed)
    assert results["hard.src / hard.tgt"] == pytest.approx({"src->tgt": 1.0, "tgt->src": 2 / 3, "mean": 5 / 6,
                                                            "size": 3})
    flat = evaluator(embed)
    assert flat["retrieval/mean"] == pytest.approx(11 / 12)  # over pairs, not weighted by their sizes
    assert flat["retrieval/tgt->src"] == pytest.approx(5 / 6)
    assert flat["retrieval/hard.src / hard.tgt/src->tgt"] == 1.0


def test_translation_retrieval_checks_its_files_when_built(tmp_path):
    src, short = write(tmp_path / "s.txt", "ab"), write(tmp_path / "short.txt", "a")
    with pytest.raises(CorpusError, match=r"s\.txt has 2 lines but .*short\.txt has 1"):
        TranslationRetrieval([(src, short)])
    with pytest.raises(CorpusError, match="not a \\(source, target\\) tuple"):
        TranslationRetrieval([f"{src},{short}"])
    with pytest.raises(CorpusError, match="not found"):
        TranslationRetrieval([(src, str(tmp_path / "missing.txt"))])
    with pytest.raises(CorpusError, match=r"TranslationRetrieval.pairs is empty"):
        TranslationRetrieval([])
    with pytest.raises(CorpusError, match=r"DistillationMSE.pairs gives \S*s\.txt / \S*s\.txt twice"):
        DistillationMSE([(src, src), (src, src)], teacher=lambda sentences: np.eye(len(sentences)))


def test_sets_whose_file_names_clash_are_named_by_their_paths(tmp_path):
    """Two folders with the same file names must give two sets, not one that hides the other."""
    embed = lookup({"a": [1, 0], "b": [0, 1], "A": [1, 0], "B": [1, 0.1]})
    pairs = []
    for language, target in (("de", "AB"), ("fr", "ab")):
        (tmp_path / language).mkdir()
        pairs.append((write(tmp_path / language / "test.src", "ab"), write(tmp_path / language / "test.tgt", target)))
    results = TranslationRetrieval(pairs).evaluate(embed)
    assert list(results) == [" / ".join(pair) for pair in pairs]
    assert [row["mean"] for row in results.values()] == [0.75, 1.0]


def test_pool_retrieval_counts_distractors_in_the_pool(tmp_path):
    # Queries at 0 and 21 degrees, their translations at 0 and 40; distractors at 20 and 30 push b's to rank 3.
    embed = lookup({"a": circle(0), "b": circle(21), "A": circle(0), "B": circle(40), "X": circle(20),
                    "Y": circle(30)})
    pair = (write(tmp_path / "q.txt", "ab"), write(tmp_path / "t.txt", "AB"))
    results = PoolRetrieval([pair], distractors=write(tmp_path / "extra.txt", "XY")).evaluate(embed)
    assert results == {"q.txt / t.txt (pool 4)": {"P@1": 0.5, "P@3": 1.0, "P@10": 1.0, "size": 2}}
    alone = PoolRetrieval([pair], index="hnsw").evaluate(embed)
    assert alone == {"q.txt / t.txt (pool 2)": {"P@1": 1.0, "P@3": 1.0, "P@10": 1.0, "size": 2}}
    with pytest.raises(ValueError, match="Unknown index 'annoy'"):
        PoolRetrieval([pair], index="annoy")


def test_documents_are_the_mean_of_their_sentences(tmp_path):
    # Source d1 = mean(0, 90 degrees) = 45, d2 = 10, d3 = 30; target d1 = mean(90, 0) = 45, d2 = 10, d3 = 60.
    # d3's nearest targets are d1 (15 degrees off) and d2 (20): rank 3. By first sentences, d1 would miss too.
    embed = lookup({"a": circle(0), "c": circle(90), "b": circle(10), "e": circle(30), "A": circle(90),
                    "C": circle(0), "B": circle(10), "E": circle(60)})
    src = write(tmp_path / "docs.src", ["d1\ta", "d2\tb", "d1\tc", "d3\te"])
    tgt = write(tmp_path / "docs.tgt", ["d2\tB", "d3\tE", "d1\tA", "d1\tC"])
    results = DocumentRetrieval([(src, tgt)]).evaluate(embed)
    assert results == {"documents docs.src / docs.tgt": pytest.approx({"P@1": 2 / 3, "P@3": 1.0, "P@10": 1.0,
                                                                       "size": 3})}
    short = write(tmp_path / "short.tgt", ["d1\tA"])
    with pytest.raises(CorpusError, match=r"short\.tgt lacks documents \['d2', 'd3'\] of .*docs\.src"):
        DocumentRetrieval([(src, short)])


def test_sts_pairs_rows_across_languages_and_reports_the_language_bias(tmp_path):
    # Every set ranks and scales cosines like gold (100 each), but the second set's cosines are shifted up by
    # 0.5, so pooled together the correlations drop: by hand, Spearman 100 * 20 / sqrt(1680), Pearson 100 / sqrt(6).
    gold = [0, 1, 2, 3]
    vectors = {f"p{i}": [1, 0] for i in range(4)} | {"wrong": [0, 1]}
    for i, g in enumerate(gold):
        vectors[f"q{i}"] = [0.1 * g, np.sqrt(1 - (0.1 * g) ** 2)]
        vectors[f"r{i}"] = [0.5 + 0.1 * g, np.sqrt(1 - (0.5 + 0.1 * g) ** 2)]
    tsv = write(tmp_path / "sts.tsv", [f"g\tf\t2012\t{i}\t{g}\tp{i}\tq{i}" for i, g in enumerate(gold)])
    # STS-b en-de takes sentence 1 from the English file and sentence 2 from the German one.
    write(tmp_path / "stsb-en-dev.csv", [f"p{i},wrong,{g}" for i, g in enumerate(gold)])
    write(tmp_path / "stsb-de-dev.csv", [f"wrong,r{i},{g}" for i, g in enumerate(gold)])
    evaluator = STSEvaluator(tsv_files=tsv, stsb_dir=str(tmp_path), stsb_pairs=["en-de"], joined=True)
    results = evaluator.evaluate(lookup(vectors))
    assert list(results) == ["sts.tsv", "stsb dev en-de", "joined", "language bias"]
    for name in ("sts.tsv", "stsb dev en-de"):
        assert results[name] == pytest.approx({"spearman": 100.0, "pearson": 100.0, "size": 4})
    joined = {"spearman": 100 * 20 / np.sqrt(1680), "pearson": 100 / np.sqrt(6)}
    assert results["joined"] == pytest.approx(joined | {"size": 8})
    assert results["language bias"] == pytest.approx({k: v - 100 for k, v in joined.items()} | {"size": 8})
    flat = evaluator(lookup(vectors))
    assert flat["sts/spearman"] == pytest.approx(100.0)  # the joined and bias rows stay out of the mean
    assert flat["sts/language bias/pearson"] == pytest.approx(100 / np.sqrt(6) - 100)


def test_sts_needs_a_set_and_well_formed_pairs(tmp_path):
    with pytest.raises(CorpusError, match="needs tsv_files, semeval_dir, or stsb_dir with stsb_pairs"):
        STSEvaluator()
    with pytest.raises(CorpusError, match="L1-L2"):
        STSEvaluator(stsb_dir=str(tmp_path), stsb_pairs="en")
    one = write(tmp_path / "one.tsv", ["main-captions\tMSRvid\t2012test\t0001\t5.000\tA man.\tA man."])
    with pytest.raises(CorpusError, match=r"STS set one.tsv has 1 pair\(s\); a correlation needs at least 2"):
        STSEvaluator(tsv_files=one)


@needs_bfloat16
def test_mining_applies_the_train_threshold_to_test(tmp_path):
    # Absolute margin, k=1, forward selection: each source's score is the cosine to its nearest target.
    # Train: s1-t1 (1.0) and s2-t2 (0.9) are gold, s3's nearest is t2 (0.44): F1 is best (1.0) at 0.9.
    # Test: s4-t4 (1.0) and s5-t5 (0.8) are gold; at 0.9 only s4-t4 is kept: P 1, R 1/2, F1 2/3.
    embed = lookup({"s1": [1, 0, 0], "t1": [1, 0, 0], "s2": [0, 1, 0], "t2": [0, 0.9, np.sqrt(0.19)],
                    "s3": [0, 0, 1], "t3": [-1, 0, 0], "s4": [1, 0, 0], "t4": [1, 0, 0], "s5": [0, 1, 0],
                    "t5": [0, 0.8, 0.6]})

    def split(name, src, tgt, gold):
        return (write(tmp_path / f"{name}.src", [f"S{s}\ts{s}" for s in src]),
                write(tmp_path / f"{name}.tgt", [f"T{t}\tt{t}" for t in tgt]),
                write(tmp_path / f"{name}.gold", [f"S{s}\tT{s}" for s in gold]))

    train, test = split("train", [1, 2, 3], [3, 2, 1], [1, 2]), split("test", [4, 5], [5, 4], [4, 5])
    evaluator = MiningEvaluator(train, test, k=1, margin="absolute", selection="forward")
    results = evaluator.evaluate(embed)
    assert results["train"] == pytest.approx({"precision": 1.0, "recall": 1.0, "f1": 1.0, "threshold": 0.9,
                                              "size": 2})
    assert results["test"] == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "threshold": 0.9,
                                             "size": 2})
    flat = evaluator(embed)
    # The summary is the test row's: the train row scores the threshold on the data it was tuned on.
    assert flat["mining/f1"] == pytest.approx(2 / 3) and "mining/threshold" not in flat
    assert flat["mining/train/f1"] == 1.0
    alone = MiningEvaluator(train, k=1, margin="absolute")
    assert list(alone.evaluate(embed)) == ["train"] and alone(embed)["mining/f1"] == 1.0
    bfloat16 = MiningEvaluator(train, test, k=1, margin="absolute", selection="forward", matmul_dtype="bfloat16")
    assert {row: pytest.approx(metrics, abs=1e-6) for row, metrics in bfloat16.evaluate(embed).items()} == results


def test_mining_checks_its_settings_and_files_when_built(tmp_path):
    bad = write(tmp_path / "bad.src", ["no tab here"])
    with pytest.raises(CorpusError, match=r"bad\.src:1"):
        MiningEvaluator((bad, bad, bad))
    with pytest.raises(CorpusError, match="not a \\(source, target, gold\\) tuple"):
        MiningEvaluator((bad, bad))
    with pytest.raises(ValueError, match="Unknown margin 'cosine'"):
        MiningEvaluator((bad, bad, bad), margin="cosine")
    with pytest.raises(ValueError, match="matmul_dtype='bfloat16' needs index 'exact', not 'ivf'"):
        MiningEvaluator((bad, bad, bad), index="ivf", matmul_dtype="bfloat16")


def test_zero_shot_classification_scores_the_test_languages(tmp_path):
    # Train: class x on the first axis, y on the second. Test: three x near the first axis, one y also there.
    vectors = {f"x{i}": [1, 0.1 * i] for i in range(8)} | {f"y{i}": [0.1 * i, 1] for i in range(8)}
    vectors |= {f"X{i}": [1, 0.05 * i] for i in range(4)}
    train = write(tmp_path / "train.en", [f"x\tx{i}" for i in range(8)] + [f"y\ty{i}" for i in range(8)])
    test = write(tmp_path / "test.de", ["x\tX0", "x\tX1", "x\tX2", "y\tX3"])
    results = ZeroShotClassification(train, test, seeds=2).evaluate(lookup(vectors))
    assert results == {"test.de": {"accuracy": 0.75, "std": 0.0, "size": 4}}


def test_distillation_mse_compares_both_sides_with_the_teachers_source_vector(tmp_path):
    # Teacher: a -> e1, b -> e2. Student: a -> e1 (0), b -> (0.6, 0.8) (0.4): mse_src 0.2;
    # A -> e2 vs T(a) = e1 (2), B -> e2 vs T(b) = e2 (0): mse_tgt 1.0.
    calls = []

    def teacher(sentences):
        calls.append(list(sentences))
        return lookup({"a": [1, 0], "b": [0, 1]})(sentences)

    pair = (write(tmp_path / "held.en", "ab"), write(tmp_path / "held.de", "AB"))
    evaluator = DistillationMSE([pair], teacher)
    student = lookup({"a": [1, 0], "b": [0.6, 0.8], "A": [0, 1], "B": [0, 1]})
    expected = {"mse_src": 0.2, "mse_tgt": 1.0, "mse": 1.2, "size": 2}
    assert evaluator.evaluate(student) == {"held.en / held.de": pytest.approx(expected)}
    assert evaluator(student)["distillation/mse"] == pytest.approx(1.2)
    assert calls == [["a", "b"]]  # the teacher embeds the source side once, when the evaluator is built
    with pytest.raises(ValueError, match="Student vectors have 3 dimensions but the teacher's have 2"):
        evaluator.evaluate(lambda sentences: np.ones((len(sentences), 3), np.float32) / np.sqrt(3))


def test_evaluators_are_gin_configurable_in_the_evaluation_module(tmp_path):
    import tf_msemb.configurables  # noqa: F401  (what training configs load)

    pair = (write(tmp_path / "s.txt", "ab"), write(tmp_path / "t.txt", "ab"))
    gin.parse_config([f"tf_msemb.evaluation.TranslationRetrieval.pairs = [{pair!r}]",
                      "TranslationRetrieval.name = 'dev'"])
    try:
        evaluator = TranslationRetrieval()
    finally:
        gin.clear_config()
    assert evaluator.name == "dev" and list(evaluator.sets) == ["s.txt / t.txt"]
