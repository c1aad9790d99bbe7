import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from random_weights import randomize
from tf_msemb.models.backbone import TransformerBackbone
from tf_msemb.models.encoder import Embedder
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.models.encoder import ensure_built
from conftest import needs_bfloat16

TINY = dict(vocabulary_size=10, hidden_dim=8, num_layers=2, num_heads=2, intermediate_dim=16, max_sequence_length=6)
MULTI = dict(pooling=["max", "mean", "first", "attention"], pooled_dim=5, normalize=True)


def _tokens(ids, lengths):
    ids = np.array(ids, np.int32)
    mask = np.arange(ids.shape[1])[None, :] < np.array(lengths)[:, None]
    return {"token_ids": ids, "padding_mask": mask}


def _fixed_weights(encoder):
    """`encoder` built, its weights drawn from N(0, 0.5^2) in `encoder.weights` order."""
    return randomize(encoder)


@pytest.mark.parametrize("pooling", ["mean", "max", "first", "attention", ["max", "mean", "first", "attention"]])
def test_output_shape_and_padding_invariance(pooling):
    encoder = SentenceEncoder(**TINY, pooling=pooling, pooled_dim=5, dropout=0.0)
    short = encoder(_tokens([[2, 5, 6, 3]], [4])).numpy()
    padded = encoder(_tokens([[2, 5, 6, 3, 0, 0], [2, 7, 3, 0, 0, 0]], [4, 3])).numpy()
    assert padded.shape == (2, encoder.output_dim) == (2, 8 if isinstance(pooling, str) else 5)
    np.testing.assert_allclose(padded[0], short[0], atol=1e-5)


@pytest.mark.parametrize("options, expected", [
    ({"pooling": "mean"},
     [[1.151577, -0.6561222, 0.28718013, -1.9390275, -0.47289598, 0.6477417, -0.38887155, -0.18331318],
      [1.15453, -0.6577453, 0.28749865, -1.9466053, -0.4729714, 0.6465494, -0.38740444, -0.18800652]]),
    (MULTI,
     [[0.05466164, 0.2878693, -0.2915893, -0.4895661, 0.7677526],
      [0.0649175, 0.2958833, -0.30013707, -0.4881422, 0.7614944]]),
], ids=["mean", "multi"])
def test_same_vectors_and_weight_order_as_the_encoder_before_the_backbone_split(options, expected):
    """Reference: `SentenceEncoder` of commit f78b2e5 (one model holding the transformer), same weights."""
    encoder = _fixed_weights(SentenceEncoder(**TINY, **options, dropout=0.0))
    vectors = encoder(_tokens([[2, 5, 6, 3, 0, 0], [2, 7, 3, 0, 0, 0]], [4, 3])).numpy()
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


def test_normalize_gives_unit_vectors():
    encoder = SentenceEncoder(**TINY, normalize=True)
    out = encoder(_tokens([[2, 5, 3], [2, 9, 3]], [3, 3])).numpy()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_dropout_only_in_training():
    encoder = SentenceEncoder(**TINY, dropout=0.5)
    tokens = _tokens([[2, 5, 6, 3]], [4])
    np.testing.assert_array_equal(encoder(tokens), encoder(tokens))
    assert not np.allclose(encoder(tokens, training=True), encoder(tokens, training=True))


def test_config_round_trip_rebuilds_the_same_architecture():
    encoder = SentenceEncoder(**TINY, pooling=["max", "first"], pooled_dim=4, normalize=True)
    encoder(_tokens([[2, 3]], [2]))
    clone = SentenceEncoder.from_config(encoder.get_config())
    clone(_tokens([[2, 3]], [2]))
    assert [v.shape for v in clone.weights] == [v.shape for v in encoder.weights]
    assert clone.get_config() == encoder.get_config()


@needs_bfloat16
def test_a_mixed_precision_config_rebuilds_mixed_outside_the_policy_scope():
    """A saved config names its dtype policy; the backbone and pooling must follow it, not the global policy."""
    config = SentenceEncoder(**TINY, **MULTI, dtype="mixed_bfloat16").get_config()
    clone = ensure_built(SentenceEncoder.from_config(config))
    assert keras.config.dtype_policy().name == "float32"
    layers = [clone.backbone, clone.pooling, *clone.pooling.pool_layers, clone.pooling.projection]
    assert {layer.dtype_policy.name for layer in layers} == {"mixed_bfloat16"}
    assert clone.backbone(_tokens([[2, 3]], [2])).dtype == "bfloat16"


def test_sentence_encoder_is_an_embedder_around_a_transformer_backbone_with_a_flat_config():
    encoder = SentenceEncoder(**TINY, **MULTI)
    assert isinstance(encoder, Embedder) and isinstance(encoder.backbone, TransformerBackbone)
    assert (encoder.vocabulary_size, encoder.hidden_dim, encoder.output_dim) == (10, 8, 5)
    config = encoder.get_config()
    assert "backbone" not in config
    assert {key: config[key] for key in TINY} == TINY and config["pooling"] == MULTI["pooling"]


def _bert_embedder():
    backbone = keras_hub.models.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=2, hidden_dim=8,
                                             intermediate_dim=16, max_sequence_length=6)
    return Embedder(backbone, pooling="first", normalize=True)


@pytest.mark.parametrize("make", [lambda: SentenceEncoder(**TINY, **MULTI), _bert_embedder], ids=["scratch", "bert"])
def test_copies_from_config_line_up_weight_for_weight(make):
    """Momentum and EMA copies are made from the config and updated by `zip(copy.weights, base.weights)`."""
    encoder = _fixed_weights(make())
    copy = ensure_built(encoder.__class__.from_config(encoder.get_config()))
    assert [(v.path, v.shape, v.trainable) for v in copy.weights] == [
        (v.path, v.shape, v.trainable) for v in encoder.weights]
    copy.set_weights(encoder.get_weights())
    tokens = _tokens([[2, 5, 6, 3, 0, 0], [2, 7, 3, 0, 0, 0]], [4, 3])
    np.testing.assert_array_equal(copy(tokens), encoder(tokens))


def test_bert_pooler_is_frozen_and_segment_ids_are_zeros():
    embedder = ensure_built(_bert_embedder())
    frozen = {v.path for v in embedder.weights if not v.trainable}
    assert frozen == {"pooled_dense/kernel", "pooled_dense/bias"}
    tokens = _tokens([[2, 5, 6, 3, 0, 0]], [4])
    hidden = embedder.backbone({**tokens, "segment_ids": np.zeros_like(tokens["token_ids"])})["sequence_output"]
    np.testing.assert_allclose(embedder(tokens), keras.ops.normalize(hidden[:, 0], axis=-1), atol=1e-6)


def test_checkpoint_restores_every_transformer_layer_into_a_fresh_copy(tmp_path):
    """Non-trained copies (EMA teacher, momentum encoder) get their weights back only from the checkpoint."""
    encoder = _fixed_weights(SentenceEncoder(**TINY))
    path = tf.train.Checkpoint(encoder=encoder).write(str(tmp_path / "ckpt"))
    names = [name for name, _ in tf.train.list_variables(path)]
    assert any(name.startswith("encoder/backbone/transformer_layer_1/") for name in names)
    copy = ensure_built(SentenceEncoder(**TINY))
    tf.train.Checkpoint(encoder=copy).read(path).assert_existing_objects_matched()
    for restored, saved in zip(copy.weights, encoder.weights):
        np.testing.assert_array_equal(restored.numpy(), saved.numpy())


def test_bad_head_count():
    with pytest.raises(ValueError, match="divisible"):
        SentenceEncoder(**{**TINY, "num_heads": 3})
