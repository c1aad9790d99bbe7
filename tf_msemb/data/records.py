"""The TFRecord schema of one translation pair.

| feature          | type        | meaning                                      |
| ---------------- | ----------- | -------------------------------------------- |
| `src`, `tgt`     | bytes       | the two sentences, UTF-8                     |
| `src_lang`, `tgt_lang` | bytes | language tags, e.g. `en`, `de`               |
| `teacher`        | float list  | optional: a teacher's vector of `src`        |
| `hard_negatives` | bytes list  | optional: sentences close to `tgt` but wrong |
| `teacher_negatives` | float list | optional: teacher vectors of sources near `src`, `count x dim` flat |
| `src_ids`, `tgt_ids` | int64 list | optional: token ids (special tokens included, not truncated) |

Token ids are written when the corpus is tokenized once at writing time
(`make_tfrecords.py --tokenizer=...`); the manifest then records the
tokenizer's fingerprint so training can check it uses the same one.
"""

import tensorflow as tf

from tf_msemb.text_files import CorpusError

TEXT_FIELDS = ("src", "tgt", "src_lang", "tgt_lang")


def _bytes(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode("utf-8") for v in values]))


def make_example(src, tgt, src_lang, tgt_lang, teacher=None, hard_negatives=None, src_ids=None, tgt_ids=None):
    """Serializes one pair (the same bytes in every process); optional fields are left out when `None`."""
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
    for name, ids in (("src_ids", src_ids), ("tgt_ids", tgt_ids)):
        if ids is not None:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=list(ids)))
    # Deterministic: map fields in key order, so the same pair gives the same bytes in any process.
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def text_field(fields, name="src"):
    """One text field of a parsed record's feature map, decoded (`fields` is `Example.features.feature`)."""
    return fields[name].bytes_list.value[0].decode("utf-8")


def parse_examples(serialized, features=()):
    """Parses a 1-D batch of serialized examples into a dict of tensors.

    The text fields are always read; `features` (`data.features.InputFeature`s)
    add the record fields they need, which are then required.
    """
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in TEXT_FIELDS}
    for feature in features:
        spec.update(feature.record_spec())
    return tf.io.parse_example(serialized, spec)


def record_problem(serialized, features=()):
    """What is wrong with one serialized pair for `features`, or None."""
    try:
        fields = tf.train.Example.FromString(serialized).features.feature
    except Exception:  # protobuf's DecodeError is not exported under a stable name
        return "is not a serialized tf.train.Example"
    required = list(TEXT_FIELDS) + [name for feature in features for name in feature.record_spec()]
    missing = [name for name in required if name not in fields]
    if missing:
        return f"lacks the field(s) {', '.join(missing)}"
    return next((problem for feature in features if (problem := feature.check_record(fields))), None)


def check_shards(files, features=()):
    """Reads the first record of every shard and raises `CorpusError` naming the first bad one.

    Catches shards that are not TFRecords, records without a required
    field, and fields of the wrong size (e.g. teacher vectors of another
    width) before training starts.
    """
    for path in files:
        try:
            first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
        except tf.errors.DataLossError as e:
            raise CorpusError(f"Corrupt TFRecord shard {path}: {data_loss_reason(e)}") from None
        if first is None:
            continue
        problem = record_problem(first.numpy(), features)
        if problem:
            raise CorpusError(f"TFRecord shard {path} {problem}.")


def data_loss_reason(error):
    """The useful part of a `DataLossError` ("corrupted record at 5394")."""
    message = str(error.message if hasattr(error, "message") else error)
    for marker in ("corrupted", "truncated"):
        start = message.find(marker)
        if start >= 0:
            return message[start:].split(" [Op:")[0].split("'")[0].strip()
    return message.strip().splitlines()[0]


def find_corrupt_shard(files):
    """`(path, reason)` of the first shard that cannot be read to its end, or None."""
    for path in files:
        try:
            for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 20).batch(4096):
                pass
        except tf.errors.DataLossError as e:
            return path, data_loss_reason(e)
    return None
