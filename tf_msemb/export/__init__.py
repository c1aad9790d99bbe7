"""Raw-string SavedModel export (TF-Hub style)."""

from tf_msemb.export.saved_model import EmbeddingModule
from tf_msemb.export.saved_model import export_saved_model

__all__ = ["EmbeddingModule", "export_saved_model"]
