"""Trains a SentencePiece vocabulary for tf_msemb.

    python tools/train_spm.py --input=train.en.gz --input=train.de.gz \
        --languages=en,de --vocab_size=8000 --model_prefix=runs/spm/m

Writes `<model_prefix>.model` and `.vocab`; every language in `--languages`
gets a `<2xx>` token that is never split.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.text.spm_training import train_sentencepiece

flags.DEFINE_multi_string("input", None, "Text file (plain or .gz), one sentence a line; repeat for more.")
flags.DEFINE_string("model_prefix", None, "Output path without extension.")
flags.DEFINE_integer("vocab_size", 8000, "Number of pieces, special and language tokens included.")
flags.DEFINE_list("languages", [], "Language tags; each gets a <2xx> token.")
flags.DEFINE_enum("model_type", "unigram", ["unigram", "bpe", "char", "word"], "SentencePiece algorithm.")
flags.DEFINE_float("character_coverage", 0.9995, "Share of characters the vocabulary must cover.")
flags.DEFINE_integer("max_sentences", 2_000_000, "Sample at most this many sentences.")
flags.DEFINE_integer("seed", 0, "Random seed of the sampler.")
flags.mark_flags_as_required(["input", "model_prefix"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    path = train_sentencepiece(
        FLAGS.input,
        FLAGS.model_prefix,
        FLAGS.vocab_size,
        languages=FLAGS.languages,
        model_type=FLAGS.model_type,
        character_coverage=FLAGS.character_coverage,
        max_sentences=FLAGS.max_sentences,
        seed=FLAGS.seed,
    )
    print(f"SentencePiece model: {path}")


if __name__ == "__main__":
    cli.run(main)
