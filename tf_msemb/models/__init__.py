"""Sentence encoders, pooling layers and heads."""

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.pooling import AttentionPooling
from tf_msemb.models.pooling import FirstTokenPooling
from tf_msemb.models.pooling import MaskedMaxPooling
from tf_msemb.models.pooling import MaskedMeanPooling
from tf_msemb.models.pooling import MultiPooling
from tf_msemb.models.pooling import make_pooling

__all__ = [
    "SentenceEncoder",
    "AttentionPooling",
    "FirstTokenPooling",
    "MaskedMaxPooling",
    "MaskedMeanPooling",
    "MultiPooling",
    "make_pooling",
]
