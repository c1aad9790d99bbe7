"""The multilingual dev table: the figures a multilingual user reads first, all on public dev data no recipe trains on.

`MultilingualDev` runs seven parts over a data folder laid out as `../shared/data`
(`multi30k/`, `stsb_multi_mt/`, `tatoeba/`, `parallel/wmt_newstest/`):

- `retrieval`: Multi30k val, en-de / en-fr / en-cs, nearest neighbour both ways (`TranslationRetrieval`);
- `xsts`: STS-b dev (stsb_multi_mt) with sentence 1 in English and sentence 2 in each of its ten other
  languages (seed 001, Sec. 4.1's cross-lingual STS), and their mean;
- `sts`: monolingual STS-b dev in all eleven of its languages;
- `tatoeba`: Tatoeba deu-eng accuracy, both ways (LASER's sets);
- `mining`: BUCC-style mining (`bucc_style_splits`) of de-en, fr-en and cs-en built from Multi30k val alone
  (gold pairs hidden among captions that have no partner), mined with LASER's BUCC setting (ratio margin,
  k = 4, max-score selection; seed 001, Sec. 4.2), at the threshold with the best F1 on a separate
  threshold part of the same size built the same way from other val lines (BUCC tunes it on its training data);
- `news_retrieval` and `news_mining`: the same two on WMT's newstest2014 de-en and fr-en (news, 3,003 pairs
  each; `NEWS_DEV`), the one news test set that `make parallel` holds out of every language's training records:
  captions crowd near-paraphrases, news sentences are long and far apart, and a recipe must do well on both.

Selection apart from report: STS-b dev is cut into two halves (`sts_halves`, rows sharing a sentence kept
together). Every STS figure is scored on the report half; the selection half gives one figure only,
`xsts select` (the cross-lingual mean), which recipes select `export/best` on and no table reports against
a peer.

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
from tf_msemb.evaluation.sts import correlations
from tf_msemb.evaluation.sts import set_cosines
from tf_msemb.evaluation.sts import sts_sets
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines

PARTS = ("retrieval", "xsts", "sts", "tatoeba", "mining", "news_retrieval", "news_mining")
MULTI30K_LANGUAGES = ("de", "fr", "cs")
# The news dev set: WMT newstest2014 of ../shared/data/parallel/wmt_newstest (its `origin.tsv.gz` names each
# line's test set). Each year's English-original half is shared by all of its pairs, so the year is held out whole
# (`make parallel` keeps it out of every language's records); 2014 is the only year after the all-shared 2008-2013
# sets with both de-en and fr-en.
NEWS_DEV = "newstest2014"
NEWS_LANGUAGES = ("de", "fr")
XSTS_LANGUAGES = ("de", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh")
STS_LANGUAGES = ("en", *XSTS_LANGUAGES)
# The figures table's columns; `figures` also gives `sts <lang>` for every language of STS_LANGUAGES.
FIGURES = ("retrieval", "xsts mean", "sts mean", "sts en", "sts de", "sts fr", "tatoeba", "mining f1",
           "mining de", "mining fr", "news retrieval", "news de", "news fr", "xsts select")
# Figures for choosing `export/best`, on data no reported figure scores.
SELECTION_FIGURES = ("xsts select",)


def bucc_style_splits(multi30k_dir, languages=MULTI30K_LANGUAGES, seed=0):
    """`{xx: (threshold, test)}` `MiningSplit`s of xx-en mining (xx the source side, as BUCC) from Multi30k val.

    Val is the one Multi30k split no recipe trains on; its lines are aligned across every language, so one draw
    (`mining_splits`) serves every pair and the English pools are the same for all of them.
    """
    languages = tuple(languages)
    lines = {lang: read_lines(os.path.join(multi30k_dir, f"val.{lang}.gz")) for lang in ("en", *languages)}
    sizes = {lang: len(text) for lang, text in lines.items()}
    if len(set(sizes.values())) > 1:
        raise CorpusError(f"Multi30k val files in {multi30k_dir} are not line-aligned: {sizes} lines.")
    return mining_splits(lines, languages, seed, f"Multi30k val in {multi30k_dir}")


def mining_splits(lines, languages, seed, what):
    """`{xx: (threshold, test)}` `MiningSplit`s of xx-en mining from `lines` (`{lang: texts}`, line-aligned, "en"
    among them), `what` naming them in errors.

    The usable lines (no empty text, no text repeating an earlier line's in any language) are shuffled once and
    cut in halves: the threshold part and the test part. Halves, because a ratio margin's scale depends on the
    pools' size (a sentence's neighbours are nearer in a larger pool): tuned on pools half the test's, the
    threshold sat above the test part's best for every model measured (docs/evaluation.md). Each part takes a
    third of its lines as gold pairs (their aligned xx/en texts), a third as source distractors (their xx text
    only) and a third as target distractors (their en text only), so every pool is half gold and no
    distractor's translation is on the other side.
    """
    seen = {lang: set() for lang in lines}
    usable = []
    for i in range(len(lines["en"])):
        texts = {lang: lines[lang][i] for lang in lines}
        if any(text in seen[lang] or not text.strip() for lang, text in texts.items()):
            continue
        for lang, text in texts.items():
            seen[lang].add(text)
        usable.append(i)
    if len(usable) < 18:
        raise CorpusError(f"{what} has {len(usable)} usable lines; mining needs 18.")
    order = [usable[i] for i in np.random.default_rng(seed).permutation(len(usable))]
    cut = len(order) // 2
    parts = (order[:cut], order[cut:])

    def split(lang, indices):
        third = len(indices) // 3
        gold, src, tgt = indices[:third], indices[third:2 * third], indices[2 * third:3 * third]
        src_ids = [f"g{n}" for n in range(third)] + [f"s{n}" for n in range(third)]
        tgt_ids = [f"g{n}" for n in range(third)] + [f"t{n}" for n in range(third)]
        return MiningSplit(src_ids, [lines[lang][i] for i in gold + src], tgt_ids,
                           [lines["en"][i] for i in gold + tgt], {(f"g{n}", f"g{n}") for n in range(third)})

    return {lang: tuple(split(lang, part) for part in parts) for lang in languages}


def news_pairs(newstest_dir, lang, test_set=NEWS_DEV):
    """`(en, xx)` line-aligned texts of `test_set` in `newstest_dir/<lang>-en/` (`en.txt.gz`, `<lang>.txt.gz`,
    `origin.tsv.gz`, whose first column names each line's test set)."""
    folder = os.path.join(newstest_dir, f"{lang}-en")
    english, other = (read_lines(os.path.join(folder, f"{side}.txt.gz")) for side in ("en", lang))
    origins = [line.split("\t", 1)[0] for line in read_lines(os.path.join(folder, "origin.tsv.gz"))]
    if not len(english) == len(other) == len(origins):
        raise CorpusError(f"{folder} is not line-aligned: en {len(english)}, {lang} {len(other)}, origin "
                          f"{len(origins)} lines.")
    rows = [i for i, origin in enumerate(origins) if origin == test_set]
    if not rows:
        raise CorpusError(f"{folder}/origin.tsv.gz names no line of {test_set}.")
    return [english[i] for i in rows], [other[i] for i in rows]


def sts_halves(first_sentences, second_sentences, seed=0):
    """`(select, report)`: sorted row indices of two halves of an STS set, rows that share a sentence together.

    Rows joined by a repeated sentence (STS-b dev repeats 61 of its English sentences, one 13 times) form one
    group; the groups are shuffled and dealt to the selection half until it holds half the rows, so no
    sentence is scored in both halves.
    """
    parent = list(range(len(first_sentences)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for row, sentences in enumerate(zip(first_sentences, second_sentences)):
        for sentence in sentences:
            parent[root(row)] = root(owner.setdefault(sentence, row))
    groups = {}
    for row in range(len(parent)):
        groups.setdefault(root(row), []).append(row)
    groups = list(groups.values())
    select = []
    for group in np.random.default_rng(seed).permutation(len(groups)):
        if len(select) >= len(parent) // 2:
            break
        select += groups[group]
    chosen = set(select)
    return sorted(chosen), [row for row in range(len(parent)) if row not in chosen]


def rows_of(sts_set, rows):
    """The `(sentences1, sentences2, gold)` set cut to `rows`."""
    first, second, gold = sts_set
    return [first[i] for i in rows], [second[i] for i in rows], np.asarray(gold)[rows]


@gin.configurable(module="tf_msemb.evaluation")
class MultilingualDev(Evaluator):
    """The multilingual dev table (see the module docstring) as one evaluator.

    Args:
        data_dir: the folder holding `multi30k/`, `stsb_multi_mt/`, `tatoeba/` and `parallel/wmt_newstest/`
            (`../shared/data`).
        parts: which of `PARTS` to run (a recipe's dev curve may take the cheap ones only).
        seed: the draw of the mining parts and of the STS-b halves.
        name: the metric prefix.

    Rows: `multi30k val en-xx` (`src->tgt`, `tgt->src`, `mean`), `stsb dev en-xx` / `stsb dev xx-xx` (report
    half) and `stsb select en-xx` (selection half) (`spearman`, `pearson`), `tatoeba deu-eng`,
    `mining xx-en threshold` / `mining xx-en test` (`precision`, `recall`, `f1`, `threshold`), and the news
    parts' `newstest2014 en-xx` and `news mining xx-en threshold` / `test`. The summary is `figures`, keyed
    `<name>/<figure>`.
    """

    setting_metrics = ("threshold",)

    def __init__(self, data_dir, parts=PARTS, seed=0, name="dev"):
        unknown = sorted(set(parts) - set(PARTS))
        if unknown or not parts:
            raise CorpusError(f"MultilingualDev.parts={list(parts)!r}: choose from {PARTS}.")
        self.name, self.parts = name, tuple(parts)
        multi30k = os.path.join(data_dir, "multi30k")
        newstest = os.path.join(data_dir, "parallel", "wmt_newstest")
        self.aligned = {}
        if "retrieval" in parts:
            for lang in MULTI30K_LANGUAGES:
                self.aligned[f"multi30k val en-{lang}"] = read_aligned(os.path.join(multi30k, "val.en.gz"),
                                                                       os.path.join(multi30k, f"val.{lang}.gz"))
        if "news_retrieval" in parts:
            for lang in NEWS_LANGUAGES:
                self.aligned[f"{NEWS_DEV} en-{lang}"] = news_pairs(newstest, lang)
        if "tatoeba" in parts:
            tatoeba = os.path.join(data_dir, "tatoeba", "tatoeba.deu-eng")
            self.aligned["tatoeba deu-eng"] = read_aligned(f"{tatoeba}.deu", f"{tatoeba}.eng")
        pairs = [f"en-{lang}" for lang in XSTS_LANGUAGES] * ("xsts" in parts)
        pairs += [f"{lang}-{lang}" for lang in STS_LANGUAGES] * ("sts" in parts)
        self.sts = {}
        if pairs:
            stsb = os.path.join(data_dir, "stsb_multi_mt")
            whole = sts_sets(stsb_dir=stsb, stsb_pairs=pairs, split="dev")
            english = sts_sets(stsb_dir=stsb, stsb_pairs=["en-en"], split="dev")["stsb dev en-en"]
            select, report = sts_halves(english[0], english[1], seed)
            self.sts = {name: rows_of(sts_set, report) for name, sts_set in whole.items()}
            if "xsts" in parts:
                self.sts |= {f"stsb select en-{lang}": rows_of(whole[f"stsb dev en-{lang}"], select)
                             for lang in XSTS_LANGUAGES}
        splits = {}  # row prefix -> (threshold, test)
        if "mining" in parts:
            for lang, pair in bucc_style_splits(multi30k, MULTI30K_LANGUAGES, seed).items():
                splits[f"mining {lang}-en"] = pair
        if "news_mining" in parts:
            for lang in NEWS_LANGUAGES:
                english, other = news_pairs(newstest, lang)
                found = mining_splits({"en": english, lang: other}, [lang], seed, f"{NEWS_DEV} {lang}-en in {newstest}")
                splits[f"news mining {lang}-en"] = found[lang]
        self.mining = {prefix: MiningEvaluator(threshold, test, k=4, margin="ratio", selection="max")
                       for prefix, (threshold, test) in splits.items()}
        self.derived_rows = tuple(f"{prefix} threshold" for prefix in self.mining)

    def evaluate(self, embed):
        results = {name: translation_accuracy(embed(src), embed(tgt)) | {"size": len(src)}
                   for name, (src, tgt) in self.aligned.items()}
        for name, cosine in set_cosines(self.sts, embed).items():
            results[name] = correlations(cosine, self.sts[name][2])
        for prefix, evaluator in self.mining.items():
            rows = evaluator.evaluate(embed)
            results[f"{prefix} threshold"] = rows["train"]
            results[f"{prefix} test"] = rows["test"]
        return results

    def summary(self, per_set):
        return {f"{self.name}/{figure}": value for figure, value in figures(per_set).items()}


def figures(per_set):
    """The headline figures (points, x100) of `MultilingualDev.evaluate` rows, those its parts give.

    `retrieval`: mean accuracy over Multi30k's three pairs and both directions; `xsts mean`: mean Spearman
    of the ten en-xx STS-b sets (report half); `sts <lang>`: Spearman of the monolingual set (report half) and
    `sts mean` their mean over all eleven languages; `tatoeba`: mean accuracy of both directions; `mining f1`:
    mean test F1 of the three pairs, `mining de` / `mining fr` those of de-en and fr-en; `news retrieval`: mean
    accuracy over newstest2014's two pairs and both directions; `news de` / `news fr`: news mining test F1;
    `xsts select`: the cross-lingual mean on the selection half.
    """
    found = {}

    def mean(names, metric, scale):
        if names and all(name in per_set for name in names):
            return scale * float(np.mean([per_set[name][metric] for name in names]))
        return None

    found["retrieval"] = mean([f"multi30k val en-{lang}" for lang in MULTI30K_LANGUAGES], "mean", 100)
    found["xsts mean"] = mean([f"stsb dev en-{lang}" for lang in XSTS_LANGUAGES], "spearman", 1)
    found["sts mean"] = mean([f"stsb dev {lang}-{lang}" for lang in STS_LANGUAGES], "spearman", 1)
    for lang in STS_LANGUAGES:
        found[f"sts {lang}"] = mean([f"stsb dev {lang}-{lang}"], "spearman", 1)
    found["tatoeba"] = mean(["tatoeba deu-eng"], "mean", 100)
    found["mining f1"] = mean([f"mining {lang}-en test" for lang in MULTI30K_LANGUAGES], "f1", 100)
    for lang in NEWS_LANGUAGES:
        found[f"mining {lang}"] = mean([f"mining {lang}-en test"], "f1", 100)
    found["news retrieval"] = mean([f"{NEWS_DEV} en-{lang}" for lang in NEWS_LANGUAGES], "mean", 100)
    for lang in NEWS_LANGUAGES:
        found[f"news {lang}"] = mean([f"news mining {lang}-en test"], "f1", 100)
    found["xsts select"] = mean([f"stsb select en-{lang}" for lang in XSTS_LANGUAGES], "spearman", 1)
    return {figure: value for figure, value in found.items() if value is not None}
