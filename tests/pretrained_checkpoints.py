"""The tiny Hugging Face checkpoints of tests/fixtures/pretrained, and wider copies of them for width tests."""

import base64
import glob
import io
import json
import os
import shutil

import numpy as np
import sentencepiece
from sentencepiece import sentencepiece_model_pb2

from tf_msemb.quickstart import CORPUS_DIR

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "pretrained")
NAMES = ["bert_wordpiece_uncased", "bert_wordpiece_cased", "distilbert", "bert_sentencepiece", "xlm_roberta",
         "roberta"]


def load_reference(name):
    """The reference file of fixture `name`: its sentences, token ids and vectors from sentence-transformers."""
    with open(os.path.join(FIXTURES, f"{name}_reference.json"), encoding="utf-8") as f:
        return json.load(f)


def checkpoint(name):
    """The directory of the tiny checkpoint `name` (all are 32 wide)."""
    return os.path.join(FIXTURES, name)


def widened(name, target, width, seed=0):
    """A copy of checkpoint `name` in `target` with hidden size `width` and fresh random weights; returns it.

    Every axis of the checkpoint's width (32) becomes `width`; the tokenizer
    files stay, so it tokenizes as the original does.
    """
    from safetensors.numpy import load_file
    from safetensors.numpy import save_file

    shutil.copytree(checkpoint(name), target)
    config_file = os.path.join(target, "config.json")
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)
    key = "dim" if config["model_type"] == "distilbert" else "hidden_size"
    old = config[key]
    config[key] = width
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(config, f)
    rng = np.random.default_rng(seed)
    weights_file = os.path.join(target, "model.safetensors")
    tensors = {}
    for tensor_name, tensor in load_file(weights_file).items():
        shape = tuple(width if size == old else size for size in tensor.shape)
        values = rng.normal(0.0, 0.2, shape).astype(np.float32)
        tensors[tensor_name] = values + 1.0 if "LayerNorm.weight" in tensor_name else values
    save_file(tensors, weights_file, metadata={"format": "pt"})
    return str(target)


def xlm_roberta_unknown_at_three(target):
    """A copy of checkpoint `xlm_roberta` in `target` whose `sentencepiece.bpe.model` was trained with
    `bos_id=0, pad_id=1, eos_id=2, unk_id=3`, beside the `tokenizer.json` transformers writes for it; returns it.

    transformers' XLM-R converter lays the vocabulary out as `<s>`, `<pad>`,
    `</s>`, `<unk>` (`unk_id` 3), then the model's pieces from its id 3 on
    (so its own `<unk>` again, at 4), then `<mask>`: fairseq's piece i -> i + 1
    holds for every piece but the unknown one. The file is the fixture
    `xlm_roberta_tokenizer_json`'s (as transformers 5 wrote it) with this
    model's pieces, scores and normalization table. Trained on the quickstart
    corpus, well under a second.
    """
    shutil.copytree(checkpoint("xlm_roberta"), target)
    lines = []
    for path in sorted(glob.glob(os.path.join(CORPUS_DIR, "train.*.txt"))):
        with open(path, encoding="utf-8") as f:
            lines += f.read().splitlines()
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=400, model_type="unigram",
        bos_id=0, pad_id=1, eos_id=2, unk_id=3, character_coverage=1.0, normalization_rule_name="nmt_nfkc",
        num_threads=1, minloglevel=2)
    with open(os.path.join(target, "sentencepiece.bpe.model"), "wb") as f:
        f.write(model.getvalue())
    proto = sentencepiece_model_pb2.ModelProto.FromString(model.getvalue())
    with open(os.path.join(FIXTURES, "xlm_roberta_tokenizer_json", "tokenizer.json"), encoding="utf-8") as f:
        document = json.load(f)
    vocab = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    vocab += [[piece.piece, piece.score] for piece in proto.pieces[3:]] + [["<mask>", 0.0]]
    document["model"].update(vocab=vocab, unk_id=3)
    document["normalizer"]["precompiled_charsmap"] = base64.b64encode(
        proto.normalizer_spec.precompiled_charsmap).decode()
    for token in document["added_tokens"]:
        if token["content"] == "<mask>":
            token["id"] = len(vocab) - 1
    with open(os.path.join(target, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(document, f, ensure_ascii=False)
    return str(target)


def e5_like(target):
    """A tiny checkpoint of multilingual-e5-small's layout in `target`; returns it.

    The `xlm_roberta_tokenizer_json` fixture (a `tokenizer.json`-only unigram vocabulary with XLM-R's special
    ids, mean pooling, Normalize, prompts `query: ` / `passage: `) recast as e5-small is: a BERT architecture
    (positions from 0, two token types) and no default prompt. Weights stay the fixture's (one more token-type row).
    """
    from safetensors.numpy import load_file
    from safetensors.numpy import save_file

    shutil.copytree(checkpoint("xlm_roberta_tokenizer_json"), target)
    for name, update in (("config.json", {"model_type": "bert", "architectures": ["BertModel"], "type_vocab_size": 2}),
                         ("config_sentence_transformers.json", {"default_prompt_name": None})):
        path = os.path.join(target, name)
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(content | update, f, indent=1)
    weights_file = os.path.join(target, "model.safetensors")
    tensors = load_file(weights_file)
    types = "embeddings.token_type_embeddings.weight"
    tensors[types] = np.concatenate([tensors[types], tensors[types][::-1] * 0.5])
    save_file(tensors, weights_file, metadata={"format": "pt"})
    return str(target)
