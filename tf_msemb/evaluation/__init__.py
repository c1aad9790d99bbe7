"""Evaluation tasks, an `evaluator.Evaluator` class each, shared by `tf_msemb.evaluate` and training."""
