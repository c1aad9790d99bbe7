"""A data folder of ../shared/data's layout (Multi30k, STS-b in eleven languages, Tatoeba, WMT news test sets), small
and with known flaws, and a fake encoder whose figures on it follow by hand (tests of the multilingual dev table)."""

import gzip
import re
import zlib

import numpy as np

from tf_msemb.evaluation.multilingual_dev import MULTI30K_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import NEWS_DEV
from tf_msemb.evaluation.multilingual_dev import NEWS_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import XSTS_LANGUAGES

N_TRAIN, N_VAL, N_STS, N_TATOEBA, N_NEWS = 30, 36, 16, 6, 30
MISTRANSLATED_CS = 9  # Czech val lines 0..8 carry the meaning of the next of them (0 that of 1, ..., 8 that of 0)
MISTRANSLATED_FR_NEWS = 6  # French newstest2014 lines 0..5 likewise
MISTRANSLATED_DE = 6  # German STS-b sentence 2 of rows 0..5 carries another meaning
KEY = re.compile(r"#(\w+)")
WORDS = ["a dog runs", "two men", "the woman sings", "a red car", "children play", "on the beach", "a big house",
         "at night", "the old man"]  # so that a real encoder's cosines vary from row to row
ONE_HOT = {}  # key -> its dimension, given on first sight


def key_vectors(sentences, dim=512):
    """The fake encoder: a sentence's vector follows from its meaning key `#key` alone (its translations share it),
    so every figure follows from which keys the data pair. Caption and Tatoeba keys get one-hot vectors (distinct
    meanings have cosine 0, so every margin score is exact, and the data's wrong lines carry another line's key, so
    no nearest neighbour is a tie); STS keys get random dense ones (graded cosines)."""
    rows = []
    for sentence in sentences:
        key = KEY.search(sentence).group(1)
        if key.startswith("r") or key.startswith("de"):
            vector = np.random.default_rng(zlib.crc32(key.encode())).standard_normal(dim)
        else:
            vector = np.zeros(dim)
            vector[ONE_HOT.setdefault(key, len(ONE_HOT))] = 1.0
        rows.append(vector / np.linalg.norm(vector))
    return np.asarray(rows, np.float32).reshape(len(rows), dim)


def caption(lang, key):
    return f"{lang} caption #{key} on a street"


def news(lang, key):
    return f"{lang} news #{key} said the minister on Tuesday"


def write_news(root):
    """`parallel/wmt_newstest/<xx>-en` of de and fr: N_NEWS lines of NEWS_DEV (French lines 0-5 mistranslated)
    between lines of newstest2013 and 2015, which no dev part reads (their keys `o...` would be found if it did)."""
    for lang in NEWS_LANGUAGES:
        folder = root / "parallel" / "wmt_newstest" / f"{lang}-en"
        folder.mkdir(parents=True)
        rows = [("newstest2013", f"o13n{i}", f"o13n{i}") for i in range(8)]
        rows += [(NEWS_DEV, f"n{i}", f"n{(i + 1) % MISTRANSLATED_FR_NEWS if lang == 'fr' and i < MISTRANSLATED_FR_NEWS else i}")
                 for i in range(N_NEWS)]
        rows += [("newstest2015", f"o15n{i}", f"o15n{i}") for i in range(5)]
        for name, lines in (("en.txt.gz", [news("en", en) for _, en, _ in rows]),
                            (f"{lang}.txt.gz", [news(lang, xx) for _, _, xx in rows]),
                            ("origin.tsv.gz", [f"{origin}\tmixed-origin" for origin, _, _ in rows])):
            with gzip.open(folder / name, "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")


def write_dev_data(root):
    """A data folder with the layout of ../shared/data: Multi30k (Czech val lines 0-8 mistranslated), STS-b dev in
    en + ten languages (German sentence 2 of rows 0-5 mistranslated), Tatoeba and the news test sets
    (`write_news`)."""
    m30k = root / "multi30k"
    m30k.mkdir(parents=True)
    for lang in ("en", *MULTI30K_LANGUAGES):
        train = [caption(lang, f"t{i}") for i in range(N_TRAIN)]
        val = [caption(lang, f"v{(i + 1) % MISTRANSLATED_CS if lang == 'cs' and i < MISTRANSLATED_CS else i}")
               for i in range(N_VAL)]
        for split, lines in (("train", train), ("val", val)):
            with gzip.open(m30k / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    stsb = root / "stsb_multi_mt"
    stsb.mkdir()
    gold = [4.5, 0.5, 3.0, 2.0, 5.0, 1.5, 3.5, 2.5, 4.0, 0.0, 1.0, 4.8, 2.2, 3.8, 0.8, 2.8]
    for lang in ("en", *XSTS_LANGUAGES):
        rows = []
        for i, score in enumerate(gold):
            second = f"r{i}b" if lang != "de" or i >= MISTRANSLATED_DE else f"de{i}"
            rows.append(f'"{lang} first #r{i}a {WORDS[i % len(WORDS)]}",{lang} second #{second} '
                        f'{WORDS[-1 - i % len(WORDS)]},{score}')
        (stsb / f"stsb-{lang}-dev.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    tatoeba = root / "tatoeba"
    tatoeba.mkdir()
    (tatoeba / "tatoeba.deu-eng.deu").write_text(
        "\n".join(f"Satz #q{1 - i if i < 2 else i}" for i in range(N_TATOEBA)) + "\n", encoding="utf-8")
    (tatoeba / "tatoeba.deu-eng.eng").write_text("\n".join(f"sentence #q{i}" for i in range(N_TATOEBA)) + "\n",
                                                 encoding="utf-8")
    write_news(root)
    return gold
