"""Sentence encoders, their backbone, pooling layers and heads."""

from tf_msemb.models.backbone import TransformerBackbone
from tf_msemb.models.encoder import Embedder
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.pooling import AttentionPooling
from tf_msemb.models.pooling import FirstTokenPooling
from tf_msemb.models.pooling import MaskedMaxPooling
from tf_msemb.models.pooling import MaskedMeanPooling
from tf_msemb.models.pooling import MultiPooling
from tf_msemb.models.pooling import make_pooling

__all__ = [
    "Embedder",
    "SentenceEncoder",
    "TransformerBackbone",
    "AttentionPooling",
    "FirstTokenPooling",
    "MaskedMaxPooling",
    "MaskedMeanPooling",
    "MultiPooling",
    "make_pooling",
]
