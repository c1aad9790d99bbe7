"""Imports every module that declares gin configurables, and registers the
tokenizers (which are plain Keras layers) so configs can name them."""

import gin

from tf_msemb.data import pipeline  # noqa: F401
from tf_msemb.models import encoder  # noqa: F401
from tf_msemb.models import pretrained  # noqa: F401
from tf_msemb.objectives import ema_teacher_distillation  # noqa: F401
from tf_msemb.objectives import multilingual_distillation  # noqa: F401
from tf_msemb.objectives import translation_ranking  # noqa: F401
from tf_msemb.text.tokenizers import SentencePieceTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer
from tf_msemb.training import optimizers  # noqa: F401
from tf_msemb.training import strategy  # noqa: F401
from tf_msemb.training import trainer  # noqa: F401

gin.external_configurable(SentencePieceTokenizer, module="tf_msemb.text")
gin.external_configurable(WordPieceTokenizer, module="tf_msemb.text")
