"""The quickstart corpus: short everyday sentences in en, de, fr and es.

Written by the tf_msemb team (a hand-made phrase table of subjects, actions
and places rendered in each language, plus free sentences), line-aligned:
`corpus/train.<lang>.txt` (390 sentences) and `corpus/heldout.<lang>.txt`
(110 sentences that training never sees).
"""

import os

CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
LANGUAGES = ("en", "de", "fr", "es")
