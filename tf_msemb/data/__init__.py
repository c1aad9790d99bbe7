"""Parallel-corpus records, TFRecord writing and the tf.data input pipeline."""
