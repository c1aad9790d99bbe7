"""Writes tiny Hugging Face / sentence-transformers checkpoints and their reference outputs for the parity tests.

One directory per architecture under `tests/fixtures/pretrained/<name>/`, in
the file layout of real checkpoints (`config.json`, `model.safetensors`, the
tokenizer's own files plus `tokenizer.json`, `modules.json`,
`sentence_bert_config.json`, `1_Pooling/config.json`, where asked a Dense
module and prompts), and beside it
`<name>_reference.json`: the test sentences, the token ids that
sentence-transformers feeds the model for them, and the float32 vectors of
`SentenceTransformer.encode` (with the default prompt where one is set;
`prompt_vectors` holds the vectors under each named prompt). The tokenizers are trained here on a small
multi-script corpus written for this file; the weights are random (seeded)
and larger than the usual initialization, so that a wrong layer norm,
activation or position offset shows in the vectors. Re-running the tool
rewrites the same bytes.

It runs in a separate environment with torch and sentence-transformers
(never a dependency of tf_msemb):

    python3.11 -m venv /work/peer-st && /work/peer-st/bin/pip install torch==2.13.0 \
        --index-url https://download.pytorch.org/whl/cpu && /work/peer-st/bin/pip install \
        'transformers==5.23.*' 'sentence-transformers==6.2.*' 'tokenizers==0.23.*' sentencepiece
    /work/peer-st/bin/python tools/make_parity_fixtures.py --output_dir=tests/fixtures/pretrained
"""

import argparse
import io
import json
import os
import shutil
import tempfile

import numpy as np
import sentence_transformers
import sentencepiece as spm
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers import models as st_models

MAX_SEQ_LENGTH = 32
HIDDEN = 32

# Tokenizer training text, several scripts; written for this file.
CORPUS = """\
The quick brown fox jumps over the lazy dog near the river bank.
A man is playing a guitar while the children are singing in the park.
She reads the newspaper every morning and drinks a cup of coffee.
Two women are walking along the beach at sunset, talking about their work.
The weather today is cold and rainy, but tomorrow it will be sunny.
Le café de la gare est fermé le dimanche, mais la boulangerie est ouverte.
Élève, élégant, déjà, où, garçon, naïve, Noël, cœur, français.
Die Straße führt über die Brücke zum Bahnhof; Müller und Schäfer wohnen dort.
Größe, Übung, Äpfel, Öl, fünf, schön, heißen, Bäume.
El niño come manzanas en la mañana; el señor lee un periódico español.
¿Dónde está la estación? ¡Qué día tan bonito!
Smørrebrød og rødgrød med fløde er dansk mad. Ærø og Ålborg.
São Paulo é uma cidade grande; a canção não é triste.
Kraków, Łódź i Gdańsk to miasta w Polsce; żółw pływa w rzece.
İstanbul büyük bir şehir; çay ve ekmek ağaçların altında.
Москва — столица России. Мы читаем книгу о большом городе и реке.
Привет, как дела? Сегодня хорошая погода, и мы идём гулять.
Ёжик живёт в лесу, а кошка спит на диване.
Η Αθήνα είναι η πρωτεύουσα της Ελλάδας. Καλημέρα σε όλους τους φίλους.
Το παιδί διαβάζει ένα βιβλίο στον κήπο κάτω από το δέντρο.
القاهرة مدينة كبيرة على نهر النيل. مرحبا بكم في المكتبة.
الطفل يقرأ كتابا في الحديقة مع أصدقائه كل يوم.
東京は日本の首都です。私は毎朝コーヒーを飲みます。
今日は天気がいいので、公園を散歩しました。
我今天去图书馆看书，北京大学的学生很多。
中国的长城非常有名，每年都有很多人去参观。
서울은 한국의 수도입니다. 오늘 날씨가 좋아요.
नमस्ते, आप कैसे हैं? मैं आज बाज़ार जा रहा हूँ।
भारत एक बड़ा देश है और यहाँ कई भाषाएँ बोली जाती हैं।
שלום עולם, הספר נמצא על השולחן.
สวัสดีครับ วันนี้อากาศดีมาก
Emoji are everywhere now 🙂 😀 🚀 👍 ❤️ 🎉 and people use them daily.
“Quotes”, ‘single quotes’, «guillemets», „German quotes“ — dashes – and ellipses…
Numbers like 3.14, 1,000,000 and 42% appear in e-mails such as info@example.com.
HELLO WORLD, Hello World, hello world: CASING matters for cased models.
"""

# Test sentences: each line tests a tokenization path.
SENTENCES = [
    "A man is playing a guitar.",
    "Café crème, naïve façade, jalapeño, smørrebrød, Ærø.",
    "Cafe\u0301 cre\u0300me na\u0308ive vs Café crème naïve",
    "Über den Wolken, ÜBER DEN WOLKEN, über den wolken.",
    "HELLO World hello WORLD HeLLo wOrLd",
    "The Москва river, the Αθήνα streets, القاهرة and 東京 in one line.",
    "我今天去了北京大学图书馆看书",
    "東京タワーは高いです。서울은 크다.",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "  extra   spaces\tand\ttabs \n and a newline  ",
    "",
    "This sentence is much longer than the maximum sequence length of the model, so the tokenizer has to "
    "truncate it and keep only the first pieces, Москва и Αθήνα included, 東京も.",
    "\u201cCurly quotes\u201d, \u2018single\u2019, \u00abguillemets\u00bb \u2014 dashes\u2026 and \u00bfquestions?",
    "Emoji 🙂 and 🚀 rockets 👍🏽 ❤️",
    "İstanbul ŞEHİR ıi Iİ",
    "\ufb01ne \uff21\uff22\uff23 full-width \uff11\uff12\uff13 \u2460 \u00bd",
    "control\u0007char zero\u200bwidth soft\u00adhyphen nbsp\u00a0space",
    "ᚠᚢᚦ runes and ⵜⴰⵎⴰⵣⵉⵖⵜ are unseen scripts",
    "Straße-Москва東京🙂ñ",
    "a",
    "Ελληνικά: ἀρχή, Καλημέρα κόσμε! Ёжик в тумане.",
    "Numbers 3.14, 1,000,000 and e-mail foo@bar.com (see #42).",
    "ΟΔΟΣ ΣΟΦΟΣ, a line\u2029separator\x85next \u3000ideographic\x0bspace",
    "x" * 120 + " is a word longer than BERT's hundred characters",
]


def bert_wordpiece_vocab(lowercase, merges):
    """A WordPiece vocabulary for `CORPUS`: special tokens, every character alone and as `##c`, then pieces.

    The pieces come from a SentencePiece BPE model trained on the words of
    BERT's own normalizer and word splitter (`tokenizers`' WordPiece trainer
    breaks ties differently on each run): `▁word` becomes `word`, `piece`
    becomes `##piece`.
    """
    normalizer = tokenizers.normalizers.BertNormalizer(lowercase=lowercase)
    splitter = tokenizers.pre_tokenizers.BertPreTokenizer()
    lines = [" ".join(w for w, _ in splitter.pre_tokenize_str(normalizer.normalize_str(line)))
             for line in CORPUS.splitlines()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=merges, model_type="bpe",
        character_coverage=1.0, num_threads=1, hard_vocab_limit=False, normalization_rule_name="identity",
        shuffle_input_sentence=False, minloglevel=2)
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    characters = sorted({c for line in lines for c in line if c != " "})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + characters + [f"##{c}" for c in characters]
    for i in range(processor.get_piece_size()):
        piece = processor.id_to_piece(i)
        if processor.is_control(i) or processor.is_unknown(i) or piece == "\u2581":
            continue
        token = piece[1:] if piece.startswith("\u2581") else f"##{piece}"
        if token not in vocab:
            vocab.append(token)
    return vocab


def sentencepiece_model(vocab_size):
    """Unigram SentencePiece model as XLM-R's `sentencepiece.bpe.model` (<unk>, <s>, </s> first), as bytes."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS.splitlines()), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, num_threads=1, hard_vocab_limit=False,
        normalization_rule_name="nmt_nfkc", seed_sentencepiece_size=20000, shuffle_input_sentence=False,
        minloglevel=2)
    return model.getvalue()


def byte_level_bpe(directory, vocab_size):
    """RoBERTa's byte-level BPE (`vocab.json`, `merges.txt`) trained on `CORPUS`."""
    trainer = tokenizers.ByteLevelBPETokenizer()
    trainer.train_from_iterator(CORPUS.splitlines(), vocab_size=vocab_size, min_frequency=2,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    trainer.save_model(directory)


def randomize(model, seed):
    """Seeded weights: layer norms near 1/0, everything else N(0, 0.2), so each tensor moves the output."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            noise = torch.randn(parameter.shape, generator=generator)
            if "LayerNorm" in name or "layer_norm" in name:
                parameter.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
            else:
                parameter.copy_(0.2 * noise)
    return model


def _bert_config(vocab_size, **extra):
    return transformers.BertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=64, max_position_embeddings=40,
                                   **extra)


def _roberta_config(cls, vocab_size, **extra):
    # RoBERTa-style position ids start after the padding id: 2 more rows.
    return cls(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=MAX_SEQ_LENGTH + 2, type_vocab_size=1,
               pad_token_id=1, bos_token_id=0, eos_token_id=2, **extra)


def build_bert_wordpiece(hf_dir, lowercase):
    vocab = bert_wordpiece_vocab(lowercase, 400)
    with open(os.path.join(hf_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizer(vocab=os.path.join(hf_dir, "vocab.txt"), do_lower_case=lowercase)
    return tokenizer, transformers.BertModel(_bert_config(len(vocab)))


def build_distilbert(hf_dir):
    vocab = bert_wordpiece_vocab(True, 300)
    with open(os.path.join(hf_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    tokenizer = transformers.DistilBertTokenizer(vocab=os.path.join(hf_dir, "vocab.txt"), do_lower_case=True)
    config = transformers.DistilBertConfig(vocab_size=len(vocab), dim=HIDDEN, n_layers=2, n_heads=2,
                                           hidden_dim=64, max_position_embeddings=40)
    return tokenizer, transformers.DistilBertModel(config)


def _xlm_r_tokenizer(hf_dir, vocab_size):
    """XLM-R's tokenizer from a freshly trained `sentencepiece.bpe.model`, converted by transformers itself."""
    with open(os.path.join(hf_dir, "sentencepiece.bpe.model"), "wb") as f:
        f.write(sentencepiece_model(vocab_size))
    return transformers.XLMRobertaTokenizer.from_pretrained(hf_dir)


def build_bert_sentencepiece(hf_dir):
    tokenizer = _xlm_r_tokenizer(hf_dir, 800)
    return tokenizer, transformers.BertModel(_bert_config(len(tokenizer)))


def build_xlm_roberta(hf_dir):
    tokenizer = _xlm_r_tokenizer(hf_dir, 400)
    config = _roberta_config(transformers.XLMRobertaConfig, len(tokenizer))
    return tokenizer, transformers.XLMRobertaModel(config)


def build_roberta(hf_dir):
    byte_level_bpe(hf_dir, 800)
    tokenizer = transformers.RobertaTokenizer(vocab=os.path.join(hf_dir, "vocab.json"),
                                              merges=os.path.join(hf_dir, "merges.txt"))
    config = _roberta_config(transformers.RobertaConfig, len(tokenizer))
    return tokenizer, transformers.RobertaModel(config)


def build_bert_tokenizer_json(hf_dir):
    """A WordPiece `tokenizer.json` of no known tokenizer class: its own normalizer options are the reference's.

    Cased with accents stripped (a combination no BERT default gives) and
    words of more than 8 characters unknown.
    """
    vocab = bert_wordpiece_vocab(False, 400)
    model = tokenizers.models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                        max_input_chars_per_word=8)
    backend = tokenizers.Tokenizer(model)
    backend.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=False, strip_accents=True)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab.index("[CLS]")), ("[SEP]", vocab.index("[SEP]"))])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]")
    return tokenizer, transformers.BertModel(_bert_config(len(vocab)))


# name -> (builder, pooling, L2-normalize, max_seq_length, legacy layout[, extras])
# pooling: a sentence-transformers mode or a tuple of them (concatenated). extras:
# "tokenizer_json_only" (no vocab.txt / sentencepiece.bpe.model / vocab.json + merges.txt),
# "dense" ((out_features, torch activation)), "prompts" and "default_prompt_name".
ARCHITECTURES = {
    "bert_wordpiece_uncased": (lambda d: build_bert_wordpiece(d, True), "mean", True, MAX_SEQ_LENGTH, True),
    "bert_wordpiece_cased": (lambda d: build_bert_wordpiece(d, False), "cls", False, MAX_SEQ_LENGTH, True),
    "bert_sentencepiece": (build_bert_sentencepiece, "mean", True, MAX_SEQ_LENGTH, True),
    "xlm_roberta": (build_xlm_roberta, "cls", True, MAX_SEQ_LENGTH, True),
    "roberta": (build_roberta, "max", False, MAX_SEQ_LENGTH, False),
    "distilbert": (build_distilbert, "mean", False, 24, True),
    "bert_tokenizer_json": (build_bert_tokenizer_json, ("mean", "cls"), True, MAX_SEQ_LENGTH, False,
                            {"tokenizer_json_only": True, "dense": (24, torch.nn.Tanh())}),
    "roberta_tokenizer_json": (build_roberta, ("cls", "mean", "mean_sqrt_len_tokens"), False,
                               MAX_SEQ_LENGTH, True, {"tokenizer_json_only": True}),
    "xlm_roberta_tokenizer_json": (build_xlm_roberta, "mean", True, MAX_SEQ_LENGTH, False,
                                   {"tokenizer_json_only": True, "prompts": {"query": "query: ", "document": "passage: "},
                                    "default_prompt_name": "query"}),
}

# The tokenizer's own files that real checkpoints carry beside `tokenizer.json`.
TOKENIZER_FILES = ("vocab.txt", "sentencepiece.bpe.model", "vocab.json", "merges.txt")


def _write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def write_legacy_layout(directory, pooling, normalize, max_seq_length):
    """The module files as sentence-transformers 2.x-5.x wrote them (most checkpoints on the Hub)."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    _write_json(os.path.join(directory, "modules.json"), modules)
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": max_seq_length, "do_lower_case": False})
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    names = {"cls": "cls_token", "mean": "mean_tokens", "max": "max_tokens"}
    chosen = {names.get(p, p) for p in ((pooling,) if isinstance(pooling, str) else pooling)}
    _write_json(os.path.join(directory, "1_Pooling", "config.json"),
                {"word_embedding_dimension": HIDDEN, **{f"pooling_mode_{m}": m in chosen for m in modes}})
    for name in ("config_sentence_transformers.json", "2_Normalize/config.json"):
        if os.path.exists(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    shutil.rmtree(os.path.join(directory, "2_Normalize"), ignore_errors=True)


def dense_module(in_features, out_features, activation, seed):
    """sentence-transformers' Dense with seeded N(0, 0.2) weights."""
    dense = st_models.Dense(in_features=in_features, out_features=out_features, activation_function=activation)
    return randomize(dense, 1000 + seed)


def make_fixture(name, output_dir, seed):
    builder, pooling, normalize, max_seq_length, legacy, *rest = ARCHITECTURES[name]
    extras = rest[0] if rest else {}
    directory = os.path.join(output_dir, name)
    shutil.rmtree(directory, ignore_errors=True)
    with tempfile.TemporaryDirectory() as hf_dir:
        tokenizer, model = builder(hf_dir)
        randomize(model, seed).save_pretrained(hf_dir)
        tokenizer.save_pretrained(hf_dir)
        modules = [st_models.Transformer(hf_dir, max_seq_length=max_seq_length),
                   st_models.Pooling(HIDDEN, pooling_mode=pooling)]
        if "dense" in extras:
            out_features, activation = extras["dense"]
            modules.append(dense_module(modules[1].get_embedding_dimension(), out_features, activation, seed))
        if normalize:
            modules.append(st_models.Normalize())
        SentenceTransformer(modules=modules, device="cpu", prompts=extras.get("prompts"),
                            default_prompt_name=extras.get("default_prompt_name")).save(directory)
        for file in () if extras.get("tokenizer_json_only") else TOKENIZER_FILES:
            if os.path.exists(os.path.join(hf_dir, file)) and not os.path.exists(os.path.join(directory, file)):
                shutil.copy(os.path.join(hf_dir, file), directory)
    os.remove(os.path.join(directory, "README.md"))
    if not extras.get("tokenizer_json_only") and os.path.exists(os.path.join(directory, "sentencepiece.bpe.model")):
        # transformers rebuilds the same tokenizer.json from the SentencePiece model
        # when it is absent; leaving it out halves the fixture (its normalization
        # table is ~240 KB in each file).
        os.remove(os.path.join(directory, "tokenizer.json"))
    if legacy:
        write_legacy_layout(directory, pooling, normalize, max_seq_length)
    # The reference: the directory as a user loads it.
    model = SentenceTransformer(directory, device="cpu")
    prompt = model.prompts.get(model.default_prompt_name) if model.default_prompt_name else None
    features = model.preprocess(SENTENCES, prompt=prompt)
    ids = [row[mask.bool()].tolist() for row, mask in zip(features["input_ids"], features["attention_mask"])]
    vectors = model.encode(SENTENCES, batch_size=8, convert_to_numpy=True).astype(np.float32)
    extra_reference = {}
    if "dense" in extras:
        extra_reference["dense"] = {"out_features": extras["dense"][0], "activation": type(extras["dense"][1]).__name__}
    if extras.get("prompts"):
        extra_reference["prompt"] = prompt
        extra_reference["prompt_vectors"] = {
            key: [[float(x) for x in row] for row in model.encode(SENTENCES, batch_size=8, prompt_name=key,
                                                                  convert_to_numpy=True).astype(np.float32)]
            for key in sorted(extras["prompts"])}
    _write_json(os.path.join(output_dir, f"{name}_reference.json"), {
        **extra_reference,
        "architecture": name,
        "pooling": pooling if isinstance(pooling, str) else "+".join(pooling),
        "normalize": normalize,
        "max_seq_length": max_seq_length,
        "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                     "sentence-transformers": sentence_transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "sentences": SENTENCES,
        "token_ids": ids,
        "vectors": [[float(x) for x in row] for row in vectors],
    })
    size = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(directory) for f in files)
    print(f"{name}: {size / 1024:.0f} KiB, {len(tokenizer)} tokens, pooling {pooling}, {sorted(extras)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="tests/fixtures/pretrained")
    parser.add_argument("--only", nargs="*", choices=sorted(ARCHITECTURES), help="Rewrite just these fixtures.")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    for seed, name in enumerate(ARCHITECTURES):
        if not args.only or name in args.only:
            make_fixture(name, args.output_dir, seed)


if __name__ == "__main__":
    main()
