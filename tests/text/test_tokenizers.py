import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from tf_msemb.text.tokenizers import SentencePieceTokenizer
from tf_msemb.text.tokenizers import WordPieceTokenizer

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "##s", "!", "the"]


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCAB) + "\n")
    return str(path)


def test_sentencepiece_matches_the_reference_library(tokenizer, spm_model):
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    texts = ["Die Frau liest eine Zeitung im Park.", "The child waters the flowers."]
    out = tokenizer(tf.constant(texts))
    for row, text in enumerate(texts):
        expected = [tokenizer.bos_id] + sp.encode(text) + [tokenizer.eos_id]
        n = len(expected)
        assert out["token_ids"][row, :n].numpy().tolist() == expected
        assert out["padding_mask"][row].numpy().sum() == n
        assert (out["token_ids"][row, n:].numpy() == tokenizer.pad_id).all()


def test_truncation_keeps_bos_and_eos(spm_model):
    tok = SentencePieceTokenizer(spm_model, max_length=6)
    ids = tok(tf.constant(["The woman reads a newspaper in the park every day."]))["token_ids"].numpy()[0]
    assert len(ids) == 6 and ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    untruncated = tok.tokenize(tf.constant(["The woman reads a newspaper in the park."]), truncate=False)
    assert untruncated.row_lengths()[0] > 6


def test_empty_and_special_flags(spm_model):
    tok = SentencePieceTokenizer(spm_model, add_bos=False, add_eos=False)
    out = tok(tf.constant(["", "   ", "Hallo"]))
    lengths = out["padding_mask"].numpy().sum(axis=1)
    assert lengths[0] == 1 and lengths[1] == 1 and lengths[2] >= 1
    assert out["token_ids"][0, 0] == tok.unk_id
    only_eos = SentencePieceTokenizer(spm_model, add_bos=False, add_eos=True)
    assert only_eos(tf.constant([""]))["token_ids"].numpy().tolist() == [[only_eos.eos_id]]


def test_empty_batch_has_one_column(tokenizer):
    out = tokenizer(tf.constant([], tf.string))
    assert out["token_ids"].shape == (0, 1) and out["padding_mask"].shape == (0, 1)


def test_normalization_runs_first(tokenizer):
    a = tokenizer(tf.constant(["\u201eHallo\u201c \u2013 Welt"]))["token_ids"].numpy()
    b = tokenizer(tf.constant(['"Hallo" \u2014 Welt']))["token_ids"].numpy()
    np.testing.assert_array_equal(a, b)


def test_language_token_id(tokenizer):
    ids = {tokenizer.token_to_id(f"<2{l}>") for l in ("en", "de", "fr", "es")}
    assert len(ids) == 4 and tokenizer.unk_id not in ids


def test_works_inside_tf_data(tokenizer):
    ds = tf.data.Dataset.from_tensor_slices(["a b", "Die Katze"]).batch(2).map(tokenizer)
    batch = next(iter(ds))
    assert batch["token_ids"].shape[0] == 2


def test_survives_a_global_seed_reset(spm_model):
    tok = SentencePieceTokenizer(spm_model)
    tf.random.set_seed(1)
    assert tok(tf.constant(["Hallo"]))["token_ids"].shape[0] == 1


def test_wordpiece(vocab_file):
    tok = WordPieceTokenizer(vocab_file, lowercase=True, max_length=8)
    out = tok(tf.constant(["Hello worlds!", "zzz", ""]))
    assert out["token_ids"].numpy().tolist() == [[2, 4, 5, 6, 7, 3], [2, 1, 3, 0, 0, 0], [2, 3, 0, 0, 0, 0]]
    assert tok.vocabulary_size == len(TINY_VOCAB)


def test_wordpiece_needs_special_tokens(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("hello\nworld\n")
    with pytest.raises(ValueError, match=r"lacks the special tokens"):
        WordPieceTokenizer(str(path))


def test_missing_model_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.model"):
        SentencePieceTokenizer(str(tmp_path / "nope.model"))


def test_lowercase_lowers_non_ascii_in_graph_and_travels_in_the_config(spm_model):
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    texts = ["ÉCOLE ÜBER DIE STRAẞE", "Ärger im ΠΑΡΚ, Жена"]
    tok = SentencePieceTokenizer(spm_model, lowercase=True)
    clone = SentencePieceTokenizer.from_config(tok.get_config())
    graph = tf.function(lambda t: clone(t)["token_ids"], input_signature=[tf.TensorSpec([None], tf.string)])
    cased = SentencePieceTokenizer(spm_model)
    for row, text in enumerate(texts):
        expected = [tok.bos_id] + sp.encode(text.lower()) + [tok.eos_id]
        assert graph(tf.constant(texts))[row, : len(expected)].numpy().tolist() == expected
        assert cased.tokenize([text])[0].numpy().tolist() != expected
    assert clone.lowercase is True and cased.get_config()["lowercase"] is False
    assert tok.fingerprint() != cased.fingerprint()


def test_config_round_trip(tokenizer, vocab_file):
    clone = SentencePieceTokenizer.from_config(tokenizer.get_config())
    assert clone.max_length == tokenizer.max_length and clone.model_file == tokenizer.model_file
    wp = WordPieceTokenizer(vocab_file, lowercase=False)
    assert WordPieceTokenizer.from_config(wp.get_config()).lowercase is False
