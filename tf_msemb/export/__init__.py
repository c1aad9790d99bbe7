"""Raw-string SavedModel export (TF-Hub style), versioned for TF Serving."""

from tf_msemb.export.saved_model import EmbeddingModule
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.saved_model import export_version

__all__ = ["EmbeddingModule", "export_saved_model", "export_version"]
