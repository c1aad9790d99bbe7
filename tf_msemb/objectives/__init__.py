"""Training objectives: `keras.Model` subclasses that override `train_step`.

Each wraps a `SentenceEncoder`; the pure losses live in `tf_msemb.losses`.
"""

from tf_msemb.objectives.translation_ranking import TranslationRanking

__all__ = ["TranslationRanking"]
