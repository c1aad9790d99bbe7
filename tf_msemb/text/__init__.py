"""In-graph text processing: normalization and subword tokenizers."""

from tf_msemb.text.normalize import normalize_text
from tf_msemb.text.vocabulary import language_token
from tf_msemb.text.spm_training import train_sentencepiece
from tf_msemb.text.tokenizers import SentencePieceTokenizer
from tf_msemb.text.tokenizers import SubwordTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer

__all__ = [
    "normalize_text",
    "language_token",
    "train_sentencepiece",
    "SentencePieceTokenizer",
    "SubwordTokenizer",
    "WordPieceTokenizer",
]
