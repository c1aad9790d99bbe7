import json
import os

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from random_weights import randomize
from tf_msemb.inference import onednn
from tf_msemb.models import packed_backbone
from tf_msemb.models.encoder import Embedder
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.heads import ProjectedEncoder
from tf_msemb.inference.packed import PackedEncoder
from tf_msemb.inference.packed import packed_embedder
from tf_msemb.inference.packed import packed_support
from tf_msemb.models.pretrained import load_pretrained
from pretrained_checkpoints import FIXTURES
from conftest import needs_bfloat16
from conftest import needs_onednn_ops

# Lengths from 2 tokens (an empty text: <s> </s>) to the tokenizer's limit of 48.
TEXTS = ["", "Hi.", "Ein Mann spielt Gitarre auf einer Bühne vor vielen Leuten am Abend.", "The dog runs.",
         "x " * 60, "Une femme lit un livre.", "A"]


def _randomized(encoder):
    """`encoder` built, every weight drawn from N(0, 0.5^2): initial weights are too small for a wrong
    activation or a missing bias to show above float32 noise."""
    return randomize(encoder)


def _sentence_encoder(tokenizer, **kwargs):
    return _randomized(SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=2, num_heads=2,
                                       intermediate_dim=32, max_sequence_length=tokenizer.max_length, **kwargs))


def _bert_encoder(tokenizer, **kwargs):
    backbone = keras_hub.models.BertBackbone(vocabulary_size=tokenizer.vocabulary_size, num_layers=2, num_heads=2,
                                             hidden_dim=16, intermediate_dim=32,
                                             max_sequence_length=tokenizer.max_length)
    return _randomized(Embedder(backbone, **kwargs))


def _both(tokenizer, encoder, compute_dtype="float32"):
    ids = tokenizer.tokenize(tf.constant(TEXTS))
    return PackedEncoder(encoder, compute_dtype)(ids).numpy(), encoder(tokenizer.pad(ids)).numpy()


@pytest.mark.parametrize("options", [
    {"pooling": "mean"},
    {"pooling": "max", "activation": "relu"},
    {"pooling": "first", "normalize": True},
])
def test_sentence_encoder_packed_equals_padded(tokenizer, options):
    packed, padded = _both(tokenizer, _sentence_encoder(tokenizer, **options))
    assert packed.shape == padded.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(packed, padded, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_bert_backbone_packed_equals_padded(tokenizer, pooling):
    """BERT adds a segment embedding and uses tanh-approximated GELU (keras-hub's `gelu_approximate`)."""
    packed, padded = _both(tokenizer, _bert_encoder(tokenizer, pooling=pooling, normalize=True))
    np.testing.assert_allclose(packed, padded, atol=1e-5)


@pytest.mark.parametrize("name", ["xlm_roberta", "roberta", "distilbert", "bert_sentencepiece"])
def test_hugging_face_checkpoints_packed_equal_padded(name):
    """RoBERTa / XLM-R (positions after the padding id, a folded token-type row; CLS and max pooling) and
    DistilBERT (no token types) from the tiny checkpoints, sentences of 2 to 32 tokens in one batch."""
    tokenizer, encoder = load_pretrained(os.path.join(FIXTURES, name))
    with open(os.path.join(FIXTURES, f"{name}_reference.json"), encoding="utf-8") as f:
        sentences = json.load(f)["sentences"] + [""]
    assert packed_support(encoder) is None
    ids = tokenizer.tokenize(tf.constant(sentences))
    assert min(ids.row_lengths()) == 2 and max(ids.row_lengths()) == tokenizer.max_length
    packed, padded = PackedEncoder(encoder)(ids).numpy(), encoder(tokenizer.pad(ids)).numpy()
    np.testing.assert_allclose(packed, padded, rtol=0, atol=1e-5)


def test_a_projected_student_packs_with_its_projection(tokenizer):
    """A student projected to its teacher's width (seed 001) exports packed, projection included."""
    encoder = ProjectedEncoder(_sentence_encoder(tokenizer, normalize=True), 24)
    ensure_built(encoder)
    encoder.projection.bias.assign(np.random.default_rng(1).normal(size=24).astype(np.float32))
    packed, padded = _both(tokenizer, encoder)
    assert packed.shape == (len(TEXTS), 24)
    np.testing.assert_allclose(packed, padded, atol=1e-5)


@needs_bfloat16
def test_bfloat16_stays_close_and_keeps_float32_output(tokenizer):
    encoder = _bert_encoder(tokenizer, normalize=True)
    half, full = _both(tokenizer, encoder, "bfloat16")
    assert half.dtype == np.float32
    cosines = (half * full).sum(axis=1)
    assert cosines.min() > 0.999 and not np.array_equal(half, full)


@needs_bfloat16
def test_float32_reads_the_live_weights_and_bfloat16_its_copies(tokenizer):
    """Float32 packing follows later weight changes (fine-tuning); bfloat16 keeps the matmul weights cast at creation."""
    encoder = _sentence_encoder(tokenizer)
    ids = tokenizer.tokenize(tf.constant(TEXTS))
    full, half = PackedEncoder(encoder), PackedEncoder(encoder, "bfloat16")
    before = half(ids).numpy()
    kernel = encoder.backbone.transformer_layers[0]._feedforward_intermediate_dense.kernel
    kernel.assign(kernel * 3.0)
    np.testing.assert_allclose(full(ids).numpy(), encoder(tokenizer.pad(ids)).numpy(), atol=1e-5)
    np.testing.assert_array_equal(half(ids).numpy(), before)


def test_empty_batch(tokenizer):
    ids = tokenizer.tokenize(tf.constant([], tf.string))
    assert PackedEncoder(_sentence_encoder(tokenizer))(ids).shape == (0, 16)


def test_traced_with_unknown_batch_and_length(tokenizer):
    packed = PackedEncoder(_bert_encoder(tokenizer))
    encode = tf.function(lambda texts: packed(tokenizer.tokenize(texts)),
                         input_signature=[tf.TensorSpec([None], tf.string)])
    for texts in (TEXTS, TEXTS[:2], ["one more sentence"] * 5):
        ids = tokenizer.tokenize(tf.constant(texts))
        np.testing.assert_allclose(encode(tf.constant(texts)).numpy(), packed(ids).numpy(), atol=1e-6)


def test_packed_embedder_gives_the_encoders_own_vectors_for_strings(tokenizer):
    """The teacher's path (precompute_teacher.py): raw vectors stay raw (an export's unit vectors would not pass),
    unit ones stay unit, the tokenizer's prompt is in, and one trace serves every batch size."""
    prompted = type(tokenizer).from_config({**tokenizer.get_config(), "prompt": "query: "})
    raw, unit = _sentence_encoder(tokenizer), _bert_encoder(tokenizer, normalize=True)
    for encoder, norms_one in ((raw, False), (unit, True)):
        for tok in (tokenizer, prompted):
            embed = packed_embedder(tok, encoder)
            for texts in (TEXTS, TEXTS[2:3], TEXTS[:5]):
                got = embed(tf.constant(texts)).numpy()
                np.testing.assert_allclose(got, encoder(tok(tf.constant(texts))).numpy(), atol=1e-5)
            assert embed.experimental_get_tracing_count() == 1
            norms = np.linalg.norm(embed(tf.constant(TEXTS)).numpy(), axis=1)
            assert np.allclose(norms, 1.0, atol=1e-5) == norms_one
    with_prompt = packed_embedder(prompted, raw)(tf.constant(TEXTS[1:3])).numpy()
    assert not np.allclose(with_prompt, packed_embedder(tokenizer, raw)(tf.constant(TEXTS[1:3])).numpy(), atol=1e-3)
    assert packed_embedder(tokenizer, _sentence_encoder(tokenizer, pooling="attention")) is None


@pytest.mark.parametrize("streams", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_side_by_side_sub_batches_give_every_sentence_its_own_vector(tokenizer, streams):
    """Every `streams`-th sentence by length per sub-batch, put back in the batch's order; fewer sentences than
    streams take the single-stream path. Traced and eager."""
    encoder = _sentence_encoder(tokenizer)
    packed = PackedEncoder(encoder, streams=streams)
    encode = tf.function(lambda ids: packed(ids))
    for texts in (TEXTS, TEXTS[1:], TEXTS[2:4], TEXTS[4:5]):
        ids = tokenizer.tokenize(tf.constant(texts))
        want = encoder(tokenizer.pad(ids)).numpy()
        np.testing.assert_allclose(packed(ids).numpy(), want, atol=1e-5)
        np.testing.assert_allclose(encode(ids).numpy(), want, atol=1e-5)


@needs_bfloat16
def test_bfloat16_attention_of_a_float32_backbone(tokenizer):
    """int8 exports' attention dtype: close to float32 states, and not them."""
    weights = packed_backbone.read_supported(_bert_encoder(tokenizer).backbone)[0]
    ids = tokenizer.tokenize(tf.constant(TEXTS))
    full = packed_backbone.PackedBackbone(weights)(ids).numpy()
    half = packed_backbone.PackedBackbone(weights, attention_dtype="bfloat16")(ids).numpy()
    cosines = (full * half).sum(axis=1) / np.linalg.norm(full, axis=1) / np.linalg.norm(half, axis=1)
    assert half.dtype == np.float32 and cosines.min() > 0.999 and not np.array_equal(full, half)


def _op_types(concrete):
    """The op types of a traced function, its branches' functions included."""
    graph = concrete.graph.as_graph_def()
    nodes = list(graph.node) + [node for function in graph.library.function for node in function.node_def]
    return {node.op for node in nodes}


@needs_onednn_ops
def test_fused_norms_run_on_large_batches_and_give_the_same_states(tokenizer):
    weights = packed_backbone.read_supported(_bert_encoder(tokenizer).backbone)[0]
    plain = packed_backbone.PackedBackbone(weights)
    fused = tf.function(packed_backbone.PackedBackbone(weights, fused_norm=onednn.layer_norm))
    ids = tokenizer.tokenize(tf.constant(TEXTS * 8))
    assert ids.flat_values.shape[0] >= packed_backbone.FUSED_NORM_MIN_TOKENS
    np.testing.assert_allclose(fused(ids).numpy(), plain(ids).numpy(), atol=1e-5)
    np.testing.assert_allclose(fused(ids[:3]).numpy(), plain(ids[:3]).numpy(), atol=1e-5)
    assert "_MklLayerNorm" in _op_types(fused.get_concrete_function(ids))
    assert "_MklLayerNorm" not in _op_types(tf.function(plain).get_concrete_function(ids))


def test_unsupported_encoders_are_named(tokenizer):
    assert packed_support(_sentence_encoder(tokenizer)) is None
    assert "'attention'" in packed_support(_sentence_encoder(tokenizer, pooling="attention"))
    assert "pooling ('mean', 'max')" in packed_support(
        _sentence_encoder(tokenizer, pooling=["mean", "max"], pooled_dim=8))
    assert "'silu'" in packed_support(_sentence_encoder(tokenizer, activation="silu"))
    distil = keras_hub.models.DistilBertBackbone(vocabulary_size=tokenizer.vocabulary_size, num_layers=1,
                                                 num_heads=2, hidden_dim=16, intermediate_dim=32,
                                                 max_sequence_length=tokenizer.max_length)
    assert packed_support(Embedder(distil)) is None
    gpt2 = keras_hub.models.GPT2Backbone(vocabulary_size=tokenizer.vocabulary_size, num_layers=1, num_heads=2,
                                         hidden_dim=16, intermediate_dim=32, max_sequence_length=8)
    assert "GPT2Backbone is not one of BertBackbone, RobertaBackbone" in packed_support(Embedder(gpt2))
    assert "Sequential is not an Embedder" in packed_support(keras.Sequential([keras.layers.Dense(2)]))
    with pytest.raises(ValueError, match="Cannot pack this encoder: pooling 'attention'"):
        PackedEncoder(_sentence_encoder(tokenizer, pooling="attention"))


def test_a_renamed_private_attribute_is_a_reason_not_a_crash(tokenizer, monkeypatch):
    """A keras-hub release that renames a `TransformerEncoder` sublayer makes packing decline, not fail."""
    encoder = _sentence_encoder(tokenizer)
    monkeypatch.setitem(packed_backbone.ENCODER_SUBLAYERS, "output_norm", "_renamed_feedforward_layer_norm")
    assert "_renamed_feedforward_layer_norm" in packed_support(encoder)
    with pytest.raises(ValueError, match="Cannot pack this encoder: its layers are not laid out"):
        PackedEncoder(encoder)


def test_missing_attributes_of_keras_hub_and_keras_are_reasons(tokenizer, monkeypatch):
    encoder = _bert_encoder(tokenizer)
    monkeypatch.delattr(encoder.backbone.transformer_layers[1], "_self_attention_layer")
    assert "'_self_attention_layer'" in packed_support(encoder)
    monkeypatch.undo()
    assert packed_support(encoder) is None
    monkeypatch.delattr(keras.layers.MultiHeadAttention, "query_dense")
    assert "'query_dense'" in packed_support(encoder)


def test_weights_packing_would_not_read_are_a_reason(tokenizer, monkeypatch):
    """An attribute that now holds another layer leaves the real one's weights unread: no silent wrong vectors."""
    encoder = _sentence_encoder(tokenizer)
    monkeypatch.setitem(packed_backbone.ENCODER_SUBLAYERS, "output", "_feedforward_intermediate_dense")
    assert packed_support(encoder) == "transformer_layer_0 does not hold exactly the weights packing reads"


def test_embedding_weights_packing_would_not_read_are_a_reason(tokenizer, monkeypatch):
    """A backbone whose embeddings hold a table packing skips (BERT's segments, read as not there) is not packed."""
    encoder = _bert_encoder(tokenizer)
    read_backbone = packed_backbone.read_backbone
    monkeypatch.setattr(packed_backbone, "read_backbone",
                        lambda backbone: read_backbone(backbone) | {"segment_table": None, "constant_row": None})
    assert "packing would not read" in packed_support(encoder) and "segment_embedding" in packed_support(encoder)


_RAGGED_IDS = tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)


@pytest.mark.parametrize("kind", ["mean", "max", "first", "bert", "projected"])
def test_a_single_sentence_gets_the_batch_path_s_vector(tokenizer, kind):
    """Every pooling, BERT's segment row, a projection; lengths from 2 tokens (an empty text) to the limit."""
    encoder = {"mean": lambda: _sentence_encoder(tokenizer),
               "max": lambda: _sentence_encoder(tokenizer, pooling="max", activation="relu"),
               "first": lambda: _sentence_encoder(tokenizer, pooling="first", normalize=True),
               "bert": lambda: _bert_encoder(tokenizer, normalize=True),
               "projected": lambda: ensure_built(ProjectedEncoder(_sentence_encoder(tokenizer), 24))}[kind]()
    packed = PackedEncoder(encoder, single_sentence=True)
    encode = tf.function(packed, input_signature=[_RAGGED_IDS])
    for text in TEXTS:
        ids = tokenizer.tokenize(tf.constant([text]))
        want = encoder(tokenizer.pad(ids)).numpy()
        np.testing.assert_allclose(encode(ids).numpy(), want, atol=1e-5)
        np.testing.assert_allclose(packed(ids).numpy(), want, atol=1e-5)


def _if_ops(concrete):
    return [op for op in concrete.graph.get_operations() if op.type in ("If", "StatelessIf")]


def test_a_single_sentence_and_only_it_takes_its_own_branch_unlowered(tokenizer, monkeypatch):
    """A branch that doubles its states shows which one ran: batches of one, traced and eager, and no other size.
    The `If` is kept as a function call, so the other branch's ops are never visited."""
    encoder = _sentence_encoder(tokenizer)
    encode_one = packed_backbone.PackedBackbone.encode_one

    def doubled(self, tokens):
        return 2 * encode_one(self, tokens)

    monkeypatch.setattr(packed_backbone.PackedBackbone, "encode_one", doubled)
    packed = PackedEncoder(encoder, single_sentence=True)
    encode = tf.function(packed, input_signature=[_RAGGED_IDS])
    for texts in (TEXTS[2:3], TEXTS[:2], TEXTS):
        ids = tokenizer.tokenize(tf.constant(texts))
        want = encoder(tokenizer.pad(ids)).numpy() * (2 if len(texts) == 1 else 1)
        np.testing.assert_allclose(encode(ids).numpy(), want, atol=1e-5)
        np.testing.assert_allclose(packed(ids).numpy(), want, atol=1e-5)
    concrete = encode.get_concrete_function()
    (branch,) = _if_ops(concrete)
    assert branch.get_attr("_lower_using_switch_merge") is False
    # The batch branch calls a function, which TensorFlow's graph rewrites reach (an If's branch they do not).
    library = {function.signature.name: function for function in concrete.graph.as_graph_def().library.function}
    calls = {node.op for node in library[branch.get_attr("else_branch").name].node_def}
    assert calls & {"PartitionedCall", "StatefulPartitionedCall"}, calls
    plain = tf.function(PackedEncoder(encoder), input_signature=[_RAGGED_IDS])
    assert all(op.get_attr("_lower_using_switch_merge") for op in _if_ops(plain.get_concrete_function()))
