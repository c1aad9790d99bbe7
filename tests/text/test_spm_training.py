import sentencepiece as spm

from tf_msemb.text.vocabulary import language_token
from tf_msemb.text.spm_training import train_sentencepiece


def test_special_ids_and_language_tokens(spm_model):
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    for lang in ("en", "de", "fr", "es"):
        piece = language_token(lang)
        assert sp.piece_to_id(piece) > 3
        # A user-defined symbol is never split.
        assert piece in sp.encode(f"{piece} Hallo", out_type=str)


def test_vocab_file_written(spm_model):
    with open(spm_model.replace(".model", ".vocab"), encoding="utf-8") as f:
        assert f.readline().startswith("<pad>\t")


def test_options_reach_the_trainer(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text("".join(f"word{i} alpha beta gamma\n" for i in range(200)))
    path = train_sentencepiece([str(src)], str(tmp_path / "m"), 60, model_type="bpe", character_coverage=1.0)
    sp = spm.SentencePieceProcessor(model_file=path)
    assert sp.get_piece_size() <= 60
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    proto = model_pb2.ModelProto.FromString(open(path, "rb").read())
    assert proto.trainer_spec.model_type == model_pb2.TrainerSpec.BPE
    assert proto.trainer_spec.character_coverage == 1.0
