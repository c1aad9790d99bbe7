"""The quickstart corpus: short everyday sentences in en, de, fr and es.

Written by the tf_msemb team (a hand-made phrase table of subjects, actions
and places rendered in each language, plus free sentences), line-aligned:
`corpus/train.<lang>.txt` (350 sentences), `corpus/dev.<lang>.txt` (40
sentences for dev metrics and model selection during training) and
`corpus/heldout.<lang>.txt` (110 sentences that neither ever sees).
"""

import os

CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
LANGUAGES = ("en", "de", "fr", "es")


def corpus_file(split, language):
    """The path of one split of the corpus in one language, inside the installed package."""
    return os.path.join(CORPUS_DIR, f"{split}.{language}.txt")


def corpus_pairs(split="dev", pivot="en"):
    """`(pivot file, other language's file)` pairs of a split, as paths inside the installed package,
    so a config that names them (`configs/quickstart.gin`'s dev retrieval) runs from any directory."""
    return [(corpus_file(split, pivot), corpus_file(split, language)) for language in LANGUAGES if language != pivot]
