"""The multilingual dev table: the figures a multilingual user reads first, all on public dev data.

`MultilingualDev` runs five parts over a data folder laid out as `../shared/data`
(`multi30k/`, `stsb_multi_mt/`, `tatoeba/`):

- `retrieval`: Multi30k val, en-de / en-fr / en-cs, nearest neighbour both ways (`TranslationRetrieval`);
- `xsts`: STS-b dev (stsb_multi_mt) with sentence 1 in English and sentence 2 in each of its ten other
  languages (seed 001, Sec. 4.1's cross-lingual STS), and their mean;
- `sts`: monolingual STS-b dev in en, de and fr;
- `tatoeba`: Tatoeba deu-eng accuracy, both ways (LASER's sets);
- `mining`: BUCC-style mining (`bucc_style_splits`): for de-en, fr-en and cs-en, Multi30k val's
  1,014 gold pairs hidden among captions on each side that have no partner, mined with LASER's BUCC
  setting (ratio margin, k = 4, max-score selection; seed 001, Sec. 4.2), at the threshold with the
  best F1 on a train split built the same way from other captions (BUCC tunes it on its training data).

`figures` turns its rows into the headline numbers (points, x100) that `tf_msemb.dev_table` prints and
that training logs as `<name>/<figure>`.
"""

import os

import gin
import numpy as np

from tf_msemb.evaluation.evaluator import Evaluator
from tf_msemb.evaluation.mining import MiningEvaluator
from tf_msemb.evaluation.mining import MiningSplit
from tf_msemb.evaluation.retrieval import read_aligned
from tf_msemb.evaluation.retrieval import translation_accuracy
from tf_msemb.evaluation.sts import STSEvaluator
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines

PARTS = ("retrieval", "xsts", "sts", "tatoeba", "mining")
MULTI30K_LANGUAGES = ("de", "fr", "cs")
XSTS_LANGUAGES = ("de", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh")
STS_LANGUAGES = ("en", "de", "fr")
FIGURES = ("retrieval", "xsts mean", "sts en", "sts de", "sts fr", "tatoeba", "mining f1")


def bucc_style_splits(multi30k_dir, languages=MULTI30K_LANGUAGES, distractors=3000, seed=0):
    """`{xx: (train, test)}` `MiningSplit`s of xx-en mining built from Multi30k (xx the source side, as BUCC).

    test: val's aligned xx/en lines are the gold pairs; each side adds `distractors` train captions whose
    translation is on neither side (source and target distractors come from disjoint train lines).
    train: the same from train lines only (as many gold pairs as val has), for the threshold. One draw of
    train lines serves every language, so the English pools are the same for all pairs; a line whose text
    in any language repeats one already taken (or a val line) is skipped, so no sentence has a twin.
    """
    languages = tuple(languages)
    path = {(split, lang): os.path.join(multi30k_dir, f"{split}.{lang}.gz")
            for split in ("train", "val") for lang in ("en", *languages)}
    lines = {key: read_lines(p) for key, p in path.items()}
    for split in ("train", "val"):
        sizes = {lang: len(lines[split, lang]) for lang in ("en", *languages)}
        if len(set(sizes.values())) > 1:
            raise CorpusError(f"Multi30k {split} files in {multi30k_dir} are not line-aligned: {sizes} lines.")
    gold_size = len(lines["val", "en"])
    seen = {lang: set(lines["val", lang]) for lang in ("en", *languages)}
    taken = []
    needed = gold_size + 4 * distractors
    for i in np.random.default_rng(seed).permutation(len(lines["train", "en"])):
        texts = {lang: lines["train", lang][i] for lang in seen}
        if any(text in seen[lang] or not text.strip() for lang, text in texts.items()):
            continue
        for lang, text in texts.items():
            seen[lang].add(text)
        taken.append(int(i))
        if len(taken) == needed:
            break
    else:
        raise CorpusError(f"Multi30k train in {multi30k_dir} has {len(taken)} usable lines; "
                          f"{needed} are needed for {distractors} distractors a side.")
    test_src, test_tgt, train_gold, train_src, train_tgt = (
        taken[:distractors], taken[distractors:2 * distractors], taken[2 * distractors:2 * distractors + gold_size],
        taken[-2 * distractors:-distractors], taken[-distractors:])

    def split(gold_lines, src_lines, tgt_lines):
        src_ids = [f"g{n}" for n in range(len(gold_lines[0]))] + [f"s{n}" for n in range(len(src_lines))]
        tgt_ids = [f"g{n}" for n in range(len(gold_lines[1]))] + [f"t{n}" for n in range(len(tgt_lines))]
        gold = {(f"g{n}", f"g{n}") for n in range(len(gold_lines[0]))}
        return MiningSplit(src_ids, gold_lines[0] + src_lines, tgt_ids, gold_lines[1] + tgt_lines, gold)

    def train_lines(lang, indices):
        return [lines["train", lang][i] for i in indices]

    splits = {}
    for lang in languages:
        train = split((train_lines(lang, train_gold), train_lines("en", train_gold)),
                      train_lines(lang, train_src), train_lines("en", train_tgt))
        test = split((lines["val", lang], lines["val", "en"]), train_lines(lang, test_src),
                     train_lines("en", test_tgt))
        splits[lang] = (train, test)
    return splits


@gin.configurable(module="tf_msemb.evaluation")
class MultilingualDev(Evaluator):
    """The multilingual dev table (see the module docstring) as one evaluator.

    Args:
        data_dir: the folder holding `multi30k/`, `stsb_multi_mt/` and `tatoeba/` (`../shared/data`).
        parts: which of `PARTS` to run (a recipe's dev curve may take the cheap ones only).
        distractors: captions without a partner added to each side of a mining pool.
        seed: the draw of the mining pools' train lines.
        name: the metric prefix.

    Rows: `multi30k val en-xx` (`src->tgt`, `tgt->src`, `mean`), `stsb dev en-xx` / `stsb dev xx-xx`
    (`spearman`, `pearson`), `tatoeba deu-eng` and `mining xx-en train` / `mining xx-en test`
    (`precision`, `recall`, `f1`, `threshold`). The summary is `figures`, keyed `<name>/<figure>`.
    """

    setting_metrics = ("threshold",)

    def __init__(self, data_dir, parts=PARTS, distractors=3000, seed=0, name="dev"):
        unknown = sorted(set(parts) - set(PARTS))
        if unknown or not parts:
            raise CorpusError(f"MultilingualDev.parts={list(parts)!r}: choose from {PARTS}.")
        self.name, self.parts = name, tuple(parts)
        self.derived_rows = tuple(f"mining {lang}-en train" for lang in MULTI30K_LANGUAGES)
        multi30k = os.path.join(data_dir, "multi30k")
        stsb = os.path.join(data_dir, "stsb_multi_mt")
        self.aligned = {}
        if "retrieval" in parts:
            for lang in MULTI30K_LANGUAGES:
                self.aligned[f"multi30k val en-{lang}"] = read_aligned(os.path.join(multi30k, "val.en.gz"),
                                                                       os.path.join(multi30k, f"val.{lang}.gz"))
        if "tatoeba" in parts:
            tatoeba = os.path.join(data_dir, "tatoeba", "tatoeba.deu-eng")
            self.aligned["tatoeba deu-eng"] = read_aligned(f"{tatoeba}.deu", f"{tatoeba}.eng")
        pairs = [f"en-{lang}" for lang in XSTS_LANGUAGES] * ("xsts" in parts)
        pairs += [f"{lang}-{lang}" for lang in STS_LANGUAGES] * ("sts" in parts)
        self.sts = STSEvaluator(stsb_dir=stsb, stsb_pairs=pairs, split="dev") if pairs else None
        self.mining = {}
        if "mining" in parts:
            for lang, (train, test) in bucc_style_splits(multi30k, MULTI30K_LANGUAGES, distractors, seed).items():
                self.mining[lang] = MiningEvaluator(train, test, k=4, margin="ratio", selection="max")

    def evaluate(self, embed):
        results = {name: translation_accuracy(embed(src), embed(tgt)) | {"size": len(src)}
                   for name, (src, tgt) in self.aligned.items()}
        if self.sts:
            results |= self.sts.evaluate(embed)
        for lang, evaluator in self.mining.items():
            results |= {f"mining {lang}-en {split}": row for split, row in evaluator.evaluate(embed).items()}
        return results

    def summary(self, per_set):
        return {f"{self.name}/{figure}": value for figure, value in figures(per_set).items()}


def figures(per_set):
    """The headline figures (points, x100) of `MultilingualDev.evaluate` rows, those its parts give.

    `retrieval`: mean accuracy over Multi30k's three pairs and both directions; `xsts mean`: mean Spearman
    of the ten en-xx STS-b sets; `sts <lang>`: Spearman of the monolingual set; `tatoeba`: mean accuracy
    of both directions; `mining f1`: mean test F1 of the three pairs.
    """
    found = {}

    def mean(names, metric, scale):
        if names and all(name in per_set for name in names):
            return scale * float(np.mean([per_set[name][metric] for name in names]))
        return None

    found["retrieval"] = mean([f"multi30k val en-{lang}" for lang in MULTI30K_LANGUAGES], "mean", 100)
    found["xsts mean"] = mean([f"stsb dev en-{lang}" for lang in XSTS_LANGUAGES], "spearman", 1)
    for lang in STS_LANGUAGES:
        found[f"sts {lang}"] = mean([f"stsb dev {lang}-{lang}"], "spearman", 1)
    found["tatoeba"] = mean(["tatoeba deu-eng"], "mean", 100)
    found["mining f1"] = mean([f"mining {lang}-en test" for lang in MULTI30K_LANGUAGES], "f1", 100)
    return {figure: value for figure, value in found.items() if value is not None}

