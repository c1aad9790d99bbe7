"""Other libraries' encoders beside ours, each in an interpreter of its own (started by `tf_msemb.interpreter`):
encoders.py (mUSE v3 or a sentence-transformers model as an `embed`) and
worker.py (what runs in the peer's interpreter; NumPy and the peer's library only)."""
