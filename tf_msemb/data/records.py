"""The TFRecord schema of one translation pair.

| feature          | type        | meaning                                      |
| ---------------- | ----------- | -------------------------------------------- |
| `src`, `tgt`     | bytes       | the two sentences, UTF-8                     |
| `src_lang`, `tgt_lang` | bytes | language tags, e.g. `en`, `de`               |
| `teacher`        | float list  | optional: a teacher's vector of `src`        |
| `hard_negatives` | bytes list  | optional: sentences close to `tgt` but wrong |
"""

import tensorflow as tf

TEXT_FIELDS = ("src", "tgt", "src_lang", "tgt_lang")


def _bytes(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode("utf-8") for v in values]))


def make_example(src, tgt, src_lang, tgt_lang, teacher=None, hard_negatives=None):
    """Serializes one pair; optional fields are left out when `None`."""
    feature = {
        "src": _bytes([src]),
        "tgt": _bytes([tgt]),
        "src_lang": _bytes([src_lang]),
        "tgt_lang": _bytes([tgt_lang]),
    }
    if teacher is not None:
        feature["teacher"] = tf.train.Feature(float_list=tf.train.FloatList(value=list(teacher)))
    if hard_negatives is not None:
        feature["hard_negatives"] = _bytes(hard_negatives)
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def feature_spec(teacher_dim=None, num_hard_negatives=None):
    """Parsing spec; optional fields are read only when asked for.

    `teacher_dim` makes `teacher` a required fixed-size float vector;
    `num_hard_negatives` makes `hard_negatives` a required list of that length.
    """
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in TEXT_FIELDS}
    if teacher_dim is not None:
        spec["teacher"] = tf.io.FixedLenFeature([teacher_dim], tf.float32)
    if num_hard_negatives is not None:
        spec["hard_negatives"] = tf.io.FixedLenFeature([num_hard_negatives], tf.string)
    return spec


def parse_examples(serialized, teacher_dim=None, num_hard_negatives=None):
    """Parses a 1-D batch of serialized examples into a dict of tensors."""
    return tf.io.parse_example(serialized, feature_spec(teacher_dim, num_hard_negatives))
