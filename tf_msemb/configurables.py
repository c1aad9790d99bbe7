"""Imports every module that declares gin configurables, and registers the
tokenizers (plain Keras layers), the dataset builders (passed, not called,
as `train.dataset_fn`) and the quickstart corpus' file pairs so configs can
name them."""

import gin

from tf_msemb.data.labeled_pairs import make_distributed_labeled_dataset
from tf_msemb.data.pipeline import make_distributed_dataset
from tf_msemb.data import labeled_pairs  # noqa: F401
from tf_msemb.data import pipeline  # noqa: F401
from tf_msemb.evaluation import classification  # noqa: F401
from tf_msemb.evaluation import distillation  # noqa: F401
from tf_msemb.evaluation import mining  # noqa: F401
from tf_msemb.evaluation import multilingual_dev  # noqa: F401
from tf_msemb.evaluation import retrieval  # noqa: F401
from tf_msemb.evaluation import sts  # noqa: F401
from tf_msemb.models import encoder  # noqa: F401
from tf_msemb.models import pretrained  # noqa: F401
from tf_msemb.objectives import bidirectional_dual_encoder  # noqa: F401
from tf_msemb.objectives import dual_momentum_contrast  # noqa: F401
from tf_msemb.objectives import ema_teacher_distillation  # noqa: F401
from tf_msemb.objectives import ems  # noqa: F401
from tf_msemb.objectives import multi_task  # noqa: F401
from tf_msemb.objectives import multilingual_distillation  # noqa: F401
from tf_msemb.objectives import siamese_similarity  # noqa: F401
from tf_msemb.objectives import translation_ranking  # noqa: F401
from tf_msemb.inference.int8_calibration import Int8Options
from tf_msemb.quickstart import corpus_pairs
from tf_msemb.text.tokenizers import SentencePieceTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer
from tf_msemb.training import optimizers  # noqa: F401
from tf_msemb.training import strategy  # noqa: F401
from tf_msemb.training import trainer  # noqa: F401

gin.external_configurable(make_distributed_dataset, module="tf_msemb.data")
gin.external_configurable(make_distributed_labeled_dataset, module="tf_msemb.data")
gin.external_configurable(SentencePieceTokenizer, module="tf_msemb.text")
gin.external_configurable(WordPieceTokenizer, module="tf_msemb.text")
gin.external_configurable(corpus_pairs, module="tf_msemb.quickstart")
gin.external_configurable(Int8Options, module="tf_msemb.models")
