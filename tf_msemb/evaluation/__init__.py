"""Evaluators that run on an exported raw-string SavedModel."""
