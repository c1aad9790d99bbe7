"""A tokenizer's text steps folded into its SentencePiece model's normalization table.

Runtimes without TensorFlow's string ops (LiteRT: no ICU NFKC, no regexes)
still run SentencePiece with its own table, a `precompiled_charsmap` that
rewrites the longest matching key at each position (tensorflow-text's
`FastSentencepieceTokenizer` and its TFLite kernel). The steps this package
runs before the model (`normalize_text`, lower-casing, `spaces_to_blanks`:
`SubwordTokenizer.tokenize` and `SentencePieceSegmented.sentencepiece_text`;
BERT's normalizer and punctuation split, `WordPieceTokenizer.word_text`)
act on single characters except where NFKC composes or a regex matches a
sequence, so `folded_proto` evaluates them, with the package's own TF
functions, once per key and writes one table:

    key -> model_table(steps(key))

over every code point, the model table's own keys, every canonical
decomposition (the sequences NFKC composes) and `normalize_text`'s
multi-character sequences. A WordPiece tokenizer has no SentencePiece
model: `spelling_model` makes one of single characters around the table,
so the table runs there too. What a per-key table cannot do: compose a
sequence that is no canonical decomposition (e.g. a mark out of canonical
order), and see a key's context (whitespace runs are SentencePiece's own
`remove_extra_whitespaces`, as before). `docs/on_device.md` measures what
that leaves on real text.
"""

import unicodedata

import sentencepiece
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from tf_msemb.text import normalize
from tf_msemb.text.normalize import normalize_text

# Put around each key while the steps run, so that a strip keeps a key that is a space: no canonical
# composition starts with it, it is no control character (BERT's clean text deletes those) and no step changes it.
_SENTINEL = "q"


def _code_points():
    """Every code point a UTF-8 string can hold but NUL (a table's keys and values are NUL-terminated)."""
    return [chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]


def _normalizer(charsmap):
    """SentencePiece's normalizer running the table alone (no dummy prefix, no whitespace handling)."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.normalizer_spec.precompiled_charsmap = charsmap
    proto.normalizer_spec.add_dummy_prefix = False
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = False
    return sentencepiece.SentencePieceNormalizer(model_proto=proto.SerializeToString())


def table_rules(charsmap):
    """The (key, value) rules of a `precompiled_charsmap` (empty bytes: none)."""
    return _normalizer(charsmap).Decompile() if charsmap else []


def compile_rules(rules):
    """A `precompiled_charsmap` of (key, value) rules (SentencePiece's own builder)."""
    spec = sentencepiece_model_pb2.NormalizerSpec()
    spec.ParseFromString(sentencepiece.SentencePieceNormalizer(norm_map=list(rules)).serialized_normalizer_spec())
    return spec.precompiled_charsmap


def _apply_table(charsmap, texts):
    """The model table alone on each text (no dummy prefix, no whitespace handling), as SentencePiece applies it."""
    return _normalizer(charsmap).Normalize(list(texts)) if charsmap else list(texts)


def text_steps(tokenizer, segmenter_text):
    """strings -> strings: `tokenizer`'s `normalize_text` if it has it, then `segmenter_text`, the prompt aside."""
    def steps(texts):
        if tokenizer.normalize:
            texts = normalize_text(texts)
        return segmenter_text(texts)
    return steps


def folded_rules(steps, charsmap):
    """The rules of one table doing `steps` (strings -> strings, TF) and then the table `charsmap`."""
    singles = _code_points()
    sequences = {unicodedata.normalize("NFD", c) for c in singles}
    sequences |= {key for key, _ in table_rules(charsmap)}
    sequences |= set(normalize.DOUBLE_QUOTE_SEQUENCES + normalize.SINGLE_QUOTE_SEQUENCES)
    sequences = sorted(s for s in sequences if len(s) > 1)
    keys = singles + sequences
    wrapped = steps(tf.constant([_SENTINEL + key + _SENTINEL for key in keys])).numpy()
    stepped = []
    for key, value in zip(keys, wrapped):
        value = value.decode("utf-8")
        if not (value.startswith(_SENTINEL) and value.endswith(_SENTINEL) and len(value) >= 2):
            raise ValueError(f"The text steps removed the marker around {key!r}; they cannot be folded into a table.")
        stepped.append(value[1:-1])
    values = _apply_table(charsmap, stepped)
    single = dict(zip(singles, values[: len(singles)]))
    rules = [(key, value) for key, value in zip(singles, values) if value != key]
    # A sequence needs its own rule only where it differs from its characters' rules one after the other.
    rules += [(key, value) for key, value in zip(sequences, values[len(singles):])
              if value != "".join(single[c] for c in key)]
    return rules


def folded_proto(tokenizer):
    """`tokenizer.proto` (a serialized SentencePiece `ModelProto`) whose table also does the tokenizer's text steps.

    `tokenizer` is a `SentencePieceSegmented` tokenizer; the model's pieces,
    scores and whitespace options are kept.
    """
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.proto)
    rules = folded_rules(text_steps(tokenizer, tokenizer.sentencepiece_text),
                         proto.normalizer_spec.precompiled_charsmap)
    proto.normalizer_spec.precompiled_charsmap = compile_rules(rules)
    proto.normalizer_spec.name = "tf_msemb_folded"
    return proto.SerializeToString()


# The pieces a `spelling_model` ends with: the word boundary and the character that stands for an unknown one.
WORD_BOUNDARY = "\u2581"
UNKNOWN_CHARACTER = "\ue000"


def spelling_model(rules, characters):
    """A serialized SentencePiece model that runs the table of `rules` and spells the text in `characters`.

    Its pieces are `<unk>` (id 0), one per character, then `WORD_BOUNDARY`
    and `UNKNOWN_CHARACTER` (the last two ids): segmenting and
    detokenizing it gives the table's output with whitespace runs as single
    spaces, the way a runtime without string ops applies a table. A
    `WORD_BOUNDARY` in the text is no character of the words, so it becomes
    `UNKNOWN_CHARACTER` too.
    """
    proto = sentencepiece_model_pb2.ModelProto()
    proto.trainer_spec.model_type = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id = 0, -1, -1
    piece_type = sentencepiece_model_pb2.ModelProto.SentencePiece
    proto.pieces.add(piece="<unk>", score=0.0, type=piece_type.UNKNOWN)
    for character in sorted(set(characters) - {WORD_BOUNDARY, UNKNOWN_CHARACTER}) + [WORD_BOUNDARY, UNKNOWN_CHARACTER]:
        proto.pieces.add(piece=character, score=-1.0, type=piece_type.NORMAL)
    proto.trainer_spec.vocab_size = len(proto.pieces)
    rules = [(key, value) for key, value in rules if key != WORD_BOUNDARY] + [(WORD_BOUNDARY, UNKNOWN_CHARACTER)]
    proto.normalizer_spec.name = "tf_msemb_spelling"
    proto.normalizer_spec.precompiled_charsmap = compile_rules(rules)
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = True
    proto.normalizer_spec.escape_whitespaces = True
    return proto.SerializeToString()
