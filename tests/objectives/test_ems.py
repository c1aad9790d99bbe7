import keras
import numpy as np
import pytest
import tensorflow as tf

from objectives.replica_check import assert_two_replicas_match_one
from objectives.replica_check import random_tokens
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.losses.xtr import bag_of_tokens
from tf_msemb.losses.xtr import bidirectional_xtr_loss
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives.ems import EMS
from tf_msemb.data.features import LanguageIds

TINY = dict(hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32, max_sequence_length=48)
VOCABULARY = 50

# Table XIV rows that concern the objective, as switches.
ABLATIONS = {
    "EMS": {},
    "- langs tok": {"language_embedding": False},
    "- L_cntrs": {"contrastive": None},
    "- L_XTR": {"xtr": False},
    "- L_cntrs_mlp": {"contrastive_mlp": False},
    "AMS instead of InfoNCE": {"contrastive": "ams", "contrastive_mlp": False, "xtr": False},
    "AMS+MLP": {"contrastive": "ams", "xtr": False},
    "AMS+MLP+XTR": {"contrastive": "ams"},
}


def _model(optimizer, dropout=0.1, seed=0, vocabulary_size=VOCABULARY, **options):
    keras.utils.set_random_seed(seed)
    model = EMS(SentenceEncoder(vocabulary_size, dropout=dropout, **TINY), language_dim=6, contrastive_dim=8,
                **options)
    model.build()
    model.compile(optimizer=optimizer)
    model.optimizer.build(model.trainable_variables)
    return model


def _batch(rng, batch=8):
    data = {"src": random_tokens(rng, (batch, 7), VOCABULARY), "tgt": random_tokens(rng, (batch, 6), VOCABULARY)}
    # Token ids 4 and 5 stand for <2en> and <2de>.
    data["src_lang_id"] = np.full(batch, 4, np.int32)
    data["tgt_lang_id"] = rng.choice([4, 5], size=batch).astype(np.int32)
    return data


@pytest.mark.parametrize("name", list(ABLATIONS))
def test_each_ablation_computes_its_parts_of_the_joint_loss(name):
    options = ABLATIONS[name]
    model = _model(keras.optimizers.SGD(0.0), dropout=0.0, **options)
    data = _batch(np.random.default_rng(0))
    logs = model.train_step(data)
    u, v = model.encoder(data["src"]), model.encoder(data["tgt"])
    xtr, contrastive, language = options.get("xtr", True), options.get("contrastive", "info_nce"), None
    if xtr:
        bags = [bag_of_tokens(data[s]["token_ids"], data[s]["padding_mask"], VOCABULARY, (0, 1, 2, 3))
                for s in ("src", "tgt")]
        language = options.get("language_embedding", True)
        lang_u = tf.gather(model.language_table.embeddings, data["tgt_lang_id"]) if language else None
        lang_v = tf.gather(model.language_table.embeddings, data["src_lang_id"]) if language else None

        def head(sentence, lang):
            h = sentence if lang is None else tf.concat([lang, sentence], axis=-1)
            h = tf.nn.silu(h @ model.xtr_fc.kernel + model.xtr_fc.bias)
            return h @ model.xtr_output.kernel + model.xtr_output.bias

        expected_xtr = float(bidirectional_xtr_loss(bags[0], bags[1], head(u, lang_u), head(v, lang_v)))
        assert float(logs["xtr_loss"]) == pytest.approx(expected_xtr, rel=1e-5)
    else:
        assert float(logs["xtr_loss"]) == 0.0 and not hasattr(model, "xtr_fc")
    if contrastive:
        mlp = options.get("contrastive_mlp", True)

        def g(sentence):
            if mlp:
                hidden = tf.nn.relu(sentence @ model.contrastive_hidden.kernel + model.contrastive_hidden.bias)
                sentence = hidden @ model.contrastive_output.kernel + model.contrastive_output.bias
            return tf.math.l2_normalize(sentence, axis=-1)

        x, y = g(u), g(v)
        margin = 0.3 if contrastive == "ams" else 0.0
        expected = float(bidirectional_ranking_loss(x, y, x, y, np.arange(8), 10.0, margin))
        assert float(logs["contrastive_loss"]) == pytest.approx(expected, rel=1e-5)
        assert hasattr(model, "contrastive_hidden") == mlp
    else:
        assert float(logs["contrastive_loss"]) == 0.0
    assert float(logs["loss"]) == pytest.approx(float(logs["xtr_loss"]) + float(logs["contrastive_loss"]), rel=1e-6)
    assert [type(f) for f in model.input_features] == ([LanguageIds] if language else [])


def test_bad_switches_are_refused():
    with pytest.raises(ValueError, match="at least one objective"):
        _model("sgd", xtr=False, contrastive=None)
    with pytest.raises(ValueError, match="Unknown contrastive loss 'triplet'"):
        _model("sgd", contrastive="triplet")


@pytest.mark.parametrize("contrastive", ["info_nce", "ams"])
def test_two_replicas_equal_one_replica_with_the_full_batch(two_device_strategy, contrastive):
    batch = _batch(np.random.default_rng(1))
    assert_two_replicas_match_one(
        lambda: _model(keras.optimizers.SGD(1.0), dropout=0.0, contrastive=contrastive), batch, two_device_strategy
    )


def test_loss_falls_on_real_pairs_with_language_tokens(tokenizer, quickstart_records):
    model = _model(keras.optimizers.Adam(3e-3), vocabulary_size=tokenizer.vocabulary_size)
    data = iter(make_dataset([quickstart_records], tokenizer, batch_size=16, max_tokens=48, features=model.input_features))
    step = tf.function(model.train_step, reduce_retracing=True)
    logs = []
    for _ in range(60):
        model.reset_metrics()
        logs.append({k: float(v) for k, v in step(next(data)).items()})
    for part in ("xtr_loss", "contrastive_loss"):
        assert np.mean([log[part] for log in logs[-10:]]) < 0.8 * np.mean([log[part] for log in logs[:5]]), part
