"""Where encoding time goes: tokenization, the encoder, and padding, for one way of batching.

    python tools/benchmarks/profile_encode.py --model=all-MiniLM-L6-v2 \
        --input=../shared/data/multi30k/val.en.gz --batch_size=64 \
        [--order=given|sorted] [--sub_batch_size=16] [--precision=mixed_bfloat16] [--packed]

Loads the model the way training does (tokenizer + Keras encoder, not the
SavedModel), forms batches of `--batch_size` in the given order or sorted by
length, optionally splits each into length-sorted sub-batches (what the
export's serving function does for padded batches), and times the stages
separately, each in its own `tf.function` after one warm-up pass:

- tokenize: raw strings -> padded ids (normalization + SentencePiece/WordPiece);
- encode: ids -> vectors (the Transformer and pooling);
- padding: the share of token positions that are padding.

`--packed` encodes with `PackedEncoder` (what exports do by default): tokenize
stops at ragged ids, and only attention sees padding (reported separately).
"""

import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import keras
import numpy as np
import tensorflow as tf
from absl import flags

from tf_msemb.text_files import read_lines
from tf_msemb.inference.packed import PackedEncoder
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.models.precision import with_precision

flags.DEFINE_string("model", "all-MiniLM-L6-v2", "A load_pretrained name or directory.")
flags.DEFINE_multi_string("input", None, "Text files, one sentence a line.")
flags.DEFINE_integer("limit", 5000, "Sentences taken from each input at most.")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch.")
flags.DEFINE_enum("order", "given", ["given", "sorted"], "Batches in file order or from length-sorted sentences.")
flags.DEFINE_integer("sub_batch_size", 0, "Split each batch into length-sorted sub-batches of this size (0: no).")
flags.DEFINE_enum("precision", "float32", ["float32", "mixed_bfloat16"], "Encoder compute precision.")
flags.DEFINE_bool("packed", False, "Encode the real tokens only (PackedEncoder) instead of padded batches.")
flags.mark_flag_as_required("input")
FLAGS = flags.FLAGS


def _batches(tokenizer, sentences):
    """Lists of sentences as the encoder will see them (after ordering and sub-batching by token count)."""
    if FLAGS.order == "sorted":
        sentences = sorted(sentences, key=len)
    batches = [sentences[i:i + FLAGS.batch_size] for i in range(0, len(sentences), FLAGS.batch_size)]
    if not FLAGS.sub_batch_size:
        return batches
    parts = []
    for batch in batches:
        lengths = tokenizer.tokenize(tf.constant(batch)).row_lengths().numpy()
        ordered = [batch[i] for i in np.argsort(lengths, kind="stable")]
        parts += [ordered[i:i + FLAGS.sub_batch_size] for i in range(0, len(ordered), FLAGS.sub_batch_size)]
    return parts


def _timed(function, items):
    for item in items:
        function(item)
    start = time.perf_counter()
    results = [function(item) for item in items]
    return time.perf_counter() - start, results


def main(argv):
    del argv
    sentences = [line for path in FLAGS.input for line in read_lines(path)[:FLAGS.limit]]
    tokenizer, encoder = load_pretrained(FLAGS.model)
    batches = [tf.constant(batch) for batch in _batches(tokenizer, sentences)]
    if FLAGS.packed:
        tokenize = tf.function(tokenizer.tokenize, reduce_retracing=True)
        packed = PackedEncoder(encoder, keras.DTypePolicy(FLAGS.precision).compute_dtype)
        encode = tf.function(packed, reduce_retracing=True)
    else:
        tokenize = tf.function(tokenizer, reduce_retracing=True)
        encoder = with_precision(encoder, FLAGS.precision)
        encode = tf.function(lambda tokens: encoder(tokens, training=False), reduce_retracing=True)
    tokenize_seconds, tokens = _timed(tokenize, batches)
    encode_seconds, _ = _timed(encode, tokens)
    masks = [tokenizer.pad(t)["padding_mask"] if FLAGS.packed else t["padding_mask"] for t in tokens]
    grid = sum(int(np.prod(m.shape)) for m in masks)
    real = sum(int(m.numpy().sum()) for m in masks)
    total = tokenize_seconds + encode_seconds
    print(f"{len(sentences)} sentences, batches of {FLAGS.batch_size} in {FLAGS.order} order, sub-batches "
          f"{FLAGS.sub_batch_size or '-'}, {FLAGS.precision}, {'packed' if FLAGS.packed else 'padded'}")
    print(f"{'stage':<10} {'seconds':>8} {'share':>7}")
    print(f"{'tokenize':<10} {tokenize_seconds:>8.3f} {tokenize_seconds / total:>7.1%}")
    print(f"{'encode':<10} {encode_seconds:>8.3f} {encode_seconds / total:>7.1%}")
    positions = real if FLAGS.packed else grid
    attention = f" (attention grid: {1 - real / grid:.1%} padding)" if FLAGS.packed else ""
    print(f"padding: {1 - real / positions:.1%} of {positions} token positions{attention}; "
          f"{len(sentences) / total:.1f} sentences/s without Python overhead")


if __name__ == "__main__":
    cli.run(main)
