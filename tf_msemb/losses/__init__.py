"""Pure loss functions: embeddings and labels in, a scalar out; no model plumbing."""

from tf_msemb.losses.distillation import distillation_mse
from tf_msemb.losses.distillation import multilingual_distillation_loss
from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.losses.translation_ranking import forward_ranking_loss
from tf_msemb.losses.translation_ranking import in_batch_softmax_loss

__all__ = [
    "bidirectional_ranking_loss",
    "distillation_mse",
    "forward_ranking_loss",
    "in_batch_softmax_loss",
    "multilingual_distillation_loss",
]
