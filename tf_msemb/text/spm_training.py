"""Training a SentencePiece vocabulary with one `<2xx>` token per language."""

import io
import os

import sentencepiece as spm
import tensorflow as tf

from tf_msemb.text_files import read_lines
from tf_msemb.text.normalize import normalize_text
from tf_msemb.text import vocabulary
from tf_msemb.text.vocabulary import language_token


def train_sentencepiece(
    input_files,
    model_prefix,
    vocab_size,
    languages=(),
    model_type="unigram",
    character_coverage=0.9995,
    max_sentences=2_000_000,
    seed=0,
):
    """Trains a model on `normalize_text`-ed lines and writes `<prefix>.model/.vocab`.

    `vocab_size` is an upper bound: a small corpus yields fewer pieces.
    Ids 0-3 are `<pad> <unk> <s> </s>`; the language tokens follow as
    user-defined symbols so they are never split. Returns the model path.
    """
    if not input_files:
        raise ValueError("train_sentencepiece needs at least one input file.")
    lines = []
    for path in input_files:
        lines.extend(line for line in read_lines(path) if line.strip())
    if not lines:
        raise ValueError(f"No non-empty lines in {list(input_files)}.")
    normalized = []
    for start in range(0, len(lines), 4096):
        chunk = normalize_text(tf.constant(lines[start : start + 4096])).numpy()
        normalized.extend(s.decode("utf-8") for s in chunk)
    os.makedirs(os.path.dirname(os.path.abspath(model_prefix)), exist_ok=True)
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(normalized),
        model_writer=model,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        normalization_rule_name="identity",
        user_defined_symbols=[language_token(lang) for lang in languages],
        pad_id=vocabulary.PAD_ID,
        unk_id=vocabulary.UNK_ID,
        bos_id=vocabulary.BOS_ID,
        eos_id=vocabulary.EOS_ID,
        pad_piece=vocabulary.PAD,
        unk_piece=vocabulary.UNK,
        bos_piece=vocabulary.BOS,
        eos_piece=vocabulary.EOS,
        minloglevel=2,
    )
    path = f"{model_prefix}.model"
    with open(path, "wb") as f:
        f.write(model.getvalue())
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    with open(f"{model_prefix}.vocab", "w", encoding="utf-8") as f:
        for i in range(processor.get_piece_size()):
            f.write(f"{processor.id_to_piece(i)}\t{processor.get_score(i)}\n")
    return path
