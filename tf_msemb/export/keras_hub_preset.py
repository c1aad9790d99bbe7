"""An encoder written as a keras-hub preset, in keras-hub's stock classes: `keras_hub.models.TextEmbedder.from_preset`
loads it with keras-hub alone.

keras-hub 0.32 has two text-embedding tasks, and the tokenizer picks one:

- a WordPiece vocabulary -> `BertTextEmbedder` (`BertBackbone`, `BertTokenizer`): BERT as it is (all-MiniLM-L6-v2),
  DistilBERT with a zero token type;
- a SentencePiece vocabulary -> `XLMRobertaTextEmbedder` (`XLMRobertaBackbone`, `XLMRobertaTokenizer`): XLM-R as it
  is; a BERT with XLM-R's SentencePiece (multilingual-e5-small) with its token type 0 added into the position table
  (every token's type is 0, so the sum is the same); the from-scratch encoder, or a `tokenizer.json` Unigram model,
  with its pieces reordered to XLM-R's layout (`<unk>` first) and its token table's rows to keras-hub's ids.

Then the pooling (mean, cls, max) and the L2 normalization every export applies. The stock classes fix their
numerics (BERT: tanh GELU, epsilon 1e-12; XLM-R: exact GELU, 1e-5); where the encoder's differ, the vectors differ a
little, and keras-hub's tokenizers split some text otherwise than ours (its BertTokenizer case-folds with NFKC; none
runs tf_msemb's `normalize_text`). `write_keras_hub_preset` measures both on probe sentences: the weights with our
token ids fed to both models (refused below 0.9999), the tokenizer by the sentences whose ids differ. What the task
cannot hold is refused: Dense layers, other poolings, a prompt put before every text, a SentencePiece tokenizer that
lower-cases first (a `tokenizer.json`'s whitespace split is left to SentencePiece's, which its normalizer's table
and space handling make the same but for whitespace the table leaves alone).
"""

import os

import keras_hub
import numpy as np
import tensorflow as tf

from tf_msemb.export.model_card import training_sections
from tf_msemb.export.reload import PROBE_SENTENCES
from tf_msemb.export.st_directory import modules_of
from tf_msemb.export.transformers_weights import as_array
from tf_msemb.export.transformers_weights import embedding_tables
from tf_msemb.export.transformers_weights import numerics
from tf_msemb.files import write_directory_atomically
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.text import hf_tokenizers
from tf_msemb.text import tokenizer_json
from tf_msemb.text import tokenizers

# Our pooling names -> the task's `pooling_mode`.
POOLING_MODES = {"mean": "mean", "first": "cls", "max": "max"}
# The smallest cosine, on our token ids, between the encoder and the preset's model (the stock numerics' cost).
MIN_COSINE = 0.9999
# What the stock backbones compute with: (hidden_act as transformers names it, layer-norm epsilon).
STOCK_NUMERICS = {"BertTextEmbedder": ("gelu_new", 1e-12), "XLMRobertaTextEmbedder": ("gelu", 1e-5)}


class _Vocabulary:
    """A keras-hub tokenizer for ours, and how its ids relate to our token table's rows.

    `rows[k]` is the row of our table for keras-hub's id `k`; `ids` maps our
    ids to keras-hub's (both None where they are the same).
    """

    def __init__(self, task, tokenizer, rows=None, ids=None):
        self.task, self.tokenizer, self.rows, self.ids = task, tokenizer, rows, ids


def _wordpiece(tokenizer):
    with open(tokenizer.vocabulary_file, encoding="utf-8") as f:
        vocabulary = [line.rstrip("\n") for line in f]
    named = {"[CLS]": tokenizer.bos_id, "[SEP]": tokenizer.eos_id, "[PAD]": tokenizer.pad_id,
             "[UNK]": tokenizer.unk_id}
    wrong = [name for name, i in named.items() if vocabulary[i] != name]
    if wrong or "[MASK]" not in vocabulary:
        raise ValueError(f"{tokenizer.vocabulary_file}: keras-hub's BertTokenizer names its special tokens [CLS] "
                         f"[SEP] [PAD] [UNK] [MASK]; this vocabulary's differ ({wrong or ['[MASK]']}).")
    strip_accents = tokenizer.lowercase if tokenizer.strip_accents is None else tokenizer.strip_accents
    return _Vocabulary("BertTextEmbedder", keras_hub.models.BertTokenizer(
        vocabulary=vocabulary, lowercase=tokenizer.lowercase, strip_accents=strip_accents,
        split_on_cjk=tokenizer.split_cjk))


def _fairseq(tokenizer):
    ids = (tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id)
    if ids != (hf_tokenizers.FAIRSEQ_BOS, hf_tokenizers.FAIRSEQ_PAD, hf_tokenizers.FAIRSEQ_EOS,
               hf_tokenizers.FAIRSEQ_UNK):
        raise ValueError(f"{tokenizer.model_file}: <s> <pad> </s> <unk> are ids {ids} here, not XLM-R's 0 1 2 3, "
                         "which keras-hub's XLMRobertaTokenizer assumes.")
    return _Vocabulary("XLMRobertaTextEmbedder", keras_hub.models.XLMRobertaTokenizer(proto=tokenizer.proto))


def _reordered(tokenizer, source):
    """A SentencePiece model whose ids are ours (the from-scratch model, or the one `JsonUnigramTokenizer` builds
    from a `tokenizer.json`) in XLM-R's layout: `<unk>` first, then `<s>`, `</s>`, `<pad>` (keras-hub's ids are the
    model's + 1, with `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3)."""
    from sentencepiece import sentencepiece_model_pb2

    if tokenizer.lowercase:
        raise ValueError(f"{source}: this tokenizer lower-cases text before SentencePiece, which keras-hub's "
                         "XLMRobertaTokenizer cannot; use the SavedModel or the sentence-transformers directory "
                         "(tools/export_hf.py).")
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(tokenizer.proto)
    specials = [tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id]
    order = specials + [i for i in range(len(model.pieces)) if i not in specials]
    pieces = [model.pieces[i] for i in order]
    del model.pieces[:]
    model.pieces.extend(pieces)
    model.trainer_spec.unk_id, model.trainer_spec.bos_id, model.trainer_spec.eos_id, model.trainer_spec.pad_id = (
        0, 1, 2, 3)
    # keras-hub's id of the reordered model's piece q is q + 1 (from 4 on: q = 0..2 are never produced), and 0..3 its
    # own specials.
    rows = np.array([tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id] + order[3:])
    ids = np.empty(len(order), np.int32)
    ids[rows[4:]] = np.arange(4, len(rows))
    ids[[tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id]] = [0, 1, 2, 3]
    return _Vocabulary("XLMRobertaTextEmbedder", keras_hub.models.XLMRobertaTokenizer(
        proto=model.SerializeToString()), rows=rows, ids=ids)


def keras_hub_vocabulary(tokenizer):
    """The keras-hub tokenizer and task for ours (`_Vocabulary`), or a ValueError naming what keras-hub lacks."""
    if tokenizer.prompt:
        raise ValueError(f"the tokenizer puts the prompt {tokenizer.prompt!r} before every text; keras-hub's "
                         "TextEmbedder puts none: export the model with load_pretrained.prompt='' and put the "
                         "prompt before your texts.")
    if isinstance(tokenizer, tokenizers.KerasHubTokenizer):
        task = {keras_hub.models.BertTokenizer: "BertTextEmbedder",
                keras_hub.models.XLMRobertaTokenizer: "XLMRobertaTextEmbedder"}.get(type(tokenizer.hub_tokenizer))
        if task and tokenizer.normalize:
            raise ValueError("the tokenizer runs normalize_text before keras-hub's own tokenizer, which keras-hub's "
                             "TextEmbedder does not; start from the preset without text_normalization.")
        if task:
            return _Vocabulary(task, tokenizer.hub_tokenizer)
    if isinstance(tokenizer, tokenizers.WordPieceTokenizer):
        return _wordpiece(tokenizer)
    if isinstance(tokenizer, hf_tokenizers.FairseqSentencePieceTokenizer):
        return _fairseq(tokenizer)
    if isinstance(tokenizer, tokenizers.SentencePieceTokenizer):
        return _reordered(tokenizer, tokenizer.model_file)
    if isinstance(tokenizer, tokenizer_json.JsonUnigramTokenizer):
        return _reordered(tokenizer, tokenizer.tokenizer_file)
    raise ValueError(f"{type(tokenizer).__name__} has no keras-hub TextEmbedder tokenizer; written: WordPiece "
                     "(BertTokenizer) and SentencePiece (XLMRobertaTokenizer) vocabularies.")


def _stock_backbone(backbone, vocabulary):
    """keras-hub's stock backbone of the task, holding `backbone`'s weights (token rows in keras-hub's order)."""
    tokens, positions, types, norm = embedding_tables(backbone)
    if vocabulary.rows is not None:
        tokens = tokens[vocabulary.rows]
    layers = backbone.transformer_layers
    sizes = dict(vocabulary_size=tokens.shape[0], num_layers=len(layers),
                 num_heads=layers[0]._self_attention_layer.num_heads, hidden_dim=tokens.shape[1],
                 intermediate_dim=layers[0]._feedforward_intermediate_dense.kernel.shape[1],
                 dropout=float(getattr(backbone, "dropout", 0.1)), max_sequence_length=positions.shape[0])
    if vocabulary.task == "BertTextEmbedder":
        types = types if types is not None else np.zeros((2, tokens.shape[1]), np.float32)
        stock = keras_hub.models.BertBackbone(num_segments=types.shape[0], **sizes)
        stock.segment_embedding.embeddings.assign(types)
        pooler = next((layer for layer in backbone.layers if layer.name == "pooled_dense"), None)
        if pooler is not None:
            stock.pooled_dense.set_weights(pooler.get_weights())
        stock.position_embedding.position_embeddings.assign(positions)
    else:
        stock = keras_hub.models.XLMRobertaBackbone(**sizes)
        # Every token's type is 0: its row is a constant the position table can carry.
        stock.embeddings.position_embedding.position_embeddings.assign(
            positions + (types[0] if types is not None else 0.0))
    stock.token_embedding.embeddings.assign(tokens)
    stock.embeddings_layer_norm.set_weights([as_array(norm.gamma), as_array(norm.beta)])
    for target, source in zip(stock.transformer_layers, layers):
        target.set_weights(source.get_weights())
    return stock


def _model_inputs(task, ids):
    """Our padded ids as the task's model inputs (BERT's segment ids are all 0)."""
    inputs = {"token_ids": ids["token_ids"], "padding_mask": tf.cast(ids["padding_mask"], "int32")}
    if task == "BertTextEmbedder":
        inputs["segment_ids"] = tf.zeros_like(ids["token_ids"])
    return inputs


def _cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)


def write_keras_hub_preset(tokenizer, encoder, directory, metadata=None, sentences=PROBE_SENTENCES):
    """Writes `encoder` and `tokenizer` as a keras-hub TextEmbedder preset at `directory`; returns a report.

    The report: `task`; `weights_cosine`, the smallest cosine on our token
    ids between the encoder and the written model (the stock numerics'
    cost); `cosine`, the smallest over the `sentences` keras-hub's tokenizer
    splits as ours, given as strings to the preset as keras-hub loads it;
    `differing`, the others with their cosines. `metadata` (an export's)
    gives the card its provenance and dev figures.
    """
    embedder, dense = modules_of(encoder)
    if dense or embedder.pooled_dim:
        raise ValueError(f"{type(encoder).__name__} has layers after its pooling; keras-hub's TextEmbedder has "
                         "none: use the sentence-transformers directory (tools/export_hf.py).")
    if embedder.pooling_spec not in POOLING_MODES:
        raise ValueError(f"pooling {embedder.pooling_spec!r} is no keras-hub TextEmbedder pooling_mode; written: "
                         f"{', '.join(POOLING_MODES)}.")
    numerics(embedder.backbone)  # post-LN, one activation and epsilon, or it raises naming them
    vocabulary = keras_hub_vocabulary(tokenizer)
    task_class = getattr(keras_hub.models, vocabulary.task)
    preprocessor = getattr(keras_hub.models, f"{vocabulary.task}Preprocessor")(
        tokenizer=vocabulary.tokenizer, sequence_length=tokenizer.max_length)
    task = task_class(backbone=_stock_backbone(embedder.backbone, vocabulary), preprocessor=preprocessor,
                      pooling_mode=POOLING_MODES[embedder.pooling_spec], normalize=True)

    texts = tf.constant(list(sentences))
    ours = tokenizer(texts)
    expected = l2_normalize(encoder(ours)).numpy()
    token_ids = ours["token_ids"].numpy()
    if vocabulary.ids is not None:
        token_ids = vocabulary.ids[token_ids]
    written = task(_model_inputs(vocabulary.task, dict(ours, token_ids=tf.constant(token_ids))))
    weights_cosine = float(_cosines(written, expected).min())
    if weights_cosine < MIN_COSINE:
        raise ValueError(f"keras-hub's stock {task_class.backbone_cls.__name__} computes other vectors than this "
                         f"encoder (cosine {weights_cosine:.6f} < {MIN_COSINE} on the same token ids; its numerics "
                         f"{STOCK_NUMERICS[vocabulary.task]}, the encoder's {numerics(embedder.backbone)}); not "
                         "written.")

    def write(partial):
        task.save_to_preset(partial)
        with open(os.path.join(partial, "README.md"), "w", encoding="utf-8") as f:
            f.write(render_card(os.path.basename(os.path.abspath(directory)), tokenizer, encoder, embedder, task,
                                metadata))

    write_directory_atomically(directory, write)
    loaded = keras_hub.models.TextEmbedder.from_preset(directory)
    vectors = loaded.predict(texts, verbose=0, batch_size=len(sentences))
    packed = loaded.preprocessor(texts)["token_ids"].numpy()
    lengths = ours["padding_mask"].numpy().sum(1)
    cosines = _cosines(vectors, expected)
    same, differing = [], {}
    for sentence, row, length, hub, cosine in zip(sentences, token_ids, lengths, packed, cosines):
        padded = np.full(hub.shape, vocabulary.tokenizer.pad_token_id, np.int64)
        padded[:length] = row[:length]
        if np.array_equal(padded, hub):
            same.append(cosine)
        else:
            differing[sentence] = float(cosine)
    return {"task": vocabulary.task, "weights_cosine": weights_cosine,
            "cosine": float(min(same)) if same else None, "differing": differing}


def render_card(name, tokenizer, encoder, embedder, task, metadata=None):
    """The preset's README.md: what it is, how keras-hub loads it, what it computes, where it came from."""
    metadata = metadata or {}
    backbone = task.backbone
    matryoshka = (metadata.get("objective") or {}).get("matryoshka")
    cut = metadata.get("embedding_dim") if metadata.get("embedding_dim") != metadata.get("full_embedding_dim") else None
    rows = [("task", f"`keras_hub.models.{type(task).__name__}` ({task.pooling_mode} pooling, L2-normalized)"),
            ("backbone", f"`{type(backbone).__name__}`: {backbone.num_layers} layers, {backbone.hidden_dim} wide, "
                         f"{backbone.vocabulary_size} tokens"),
            ("tokenizer", f"`{type(task.preprocessor.tokenizer).__name__}` ({type(tokenizer).__name__} in tf_msemb)"),
            ("sequence length", f"{task.preprocessor.sequence_length} tokens, special tokens included"),
            ("output dimension", f"{encoder.output_dim}" + (
                f" (the export it came from served the first {cut}: slice, then L2-normalize)" if cut else "")),
            ("Matryoshka widths", str(matryoshka) if matryoshka else "none"),
            ("prompts", ", ".join(f"{k}: {v!r}" for k, v in tokenizer.prompts.items()) + " (put before your texts)"
             if tokenizer.prompts else "none")]
    if tokenizer.normalize:
        rows.append(("text normalization", "the model was trained on text through tf_msemb's normalize_text (NFKC, "
                                           "one quote and dash per family), which keras-hub does not run"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"""---
library_name: keras-hub
pipeline_tag: sentence-similarity
tags:
- keras-hub
- sentence-similarity
- tf_msemb
---

# {name}

A sentence encoder trained with tf_msemb and written as a keras-hub preset in keras-hub's own classes: it maps text
to {encoder.output_dim}-dimensional unit vectors (cosine similarity). It loads with keras-hub alone.

| | |
|---|---|
{table}

```python
import keras_hub

embedder = keras_hub.models.TextEmbedder.from_preset({name!r})
vectors = embedder.encode_text(["Hallo Welt", "hello world"])
print(embedder.similarity(vectors, vectors))
```
{training_sections(metadata)}"""
