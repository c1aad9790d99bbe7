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
from tf_msemb.objectives.base import RunFacts
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
    "share L_emb params": {"share_output_embedding": True},
    "AMS instead of InfoNCE": {"contrastive": "ams", "contrastive_mlp": False, "xtr": False},
    "AMS+MLP": {"contrastive": "ams", "xtr": False},
    "AMS+MLP+XTR": {"contrastive": "ams"},
}


def _model(optimizer, dropout=0.1, seed=0, vocabulary_size=VOCABULARY, **options):
    keras.utils.set_random_seed(seed)
    model = EMS(SentenceEncoder(vocabulary_size, dropout=dropout, **TINY), language_dim=6, contrastive_dim=8,
                **options)
    model.build()
    # Random head weights, biases included: a bias the paper has not (W_emb's) would then show.
    rng = np.random.default_rng(seed)
    encoder_weights = {id(w) for w in model.encoder.weights}
    for weight in model.weights:
        if id(weight) not in encoder_weights:
            weight.assign(rng.normal(scale=0.3, size=weight.shape).astype(np.float32))
    model.compile(optimizer=optimizer)
    model.optimizer.build(model.trainable_variables)
    return model


def _batch(rng, batch=8):
    data = {"src": random_tokens(rng, (batch, 7), VOCABULARY), "tgt": random_tokens(rng, (batch, 6), VOCABULARY)}
    # Rows 4 and 5 of W_la stand for en and de.
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
        bags = [bag_of_tokens(data[s]["token_ids"], data[s]["padding_mask"], VOCABULARY, (0, 2, 3))
                for s in ("src", "tgt")]
        language = options.get("language_embedding", True)
        lang_u = tf.gather(model.language_table.embeddings, data["tgt_lang_id"]) if language else None
        lang_v = tf.gather(model.language_table.embeddings, data["src_lang_id"]) if language else None
        shared = options.get("share_output_embedding", False)
        w_emb = (tf.transpose(model.encoder.backbone.token_embedding.embeddings) if shared
                 else model.xtr_output.kernel)
        assert hasattr(model, "xtr_output") != shared

        def head(sentence, lang):
            # Eq. 4: q = softmax(W_emb swish(W_fc [u_la ; u] + b_fc)), no output bias.
            h = sentence if lang is None else tf.concat([lang, sentence], axis=-1)
            h = tf.nn.silu(h @ model.xtr_fc.kernel + model.xtr_fc.bias)
            return h @ w_emb

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
    with pytest.raises(ValueError, match=r"EMS.languages \['en', 'de', 'en'\] must be distinct tags"):
        _model("sgd", languages=["en", "de", "en"])
    with pytest.raises(ValueError, match=r"at most EMS.max_languages = 2"):
        _model("sgd", languages=["en", "de", "fr"], max_languages=2)


@pytest.mark.parametrize("contrastive", ["info_nce", "ams"])
def test_two_replicas_equal_one_replica_with_the_full_batch(two_device_strategy, contrastive):
    batch = _batch(np.random.default_rng(1))
    assert_two_replicas_match_one(
        lambda: _model(keras.optimizers.SGD(1.0), dropout=0.0, contrastive=contrastive), batch, two_device_strategy
    )


def test_loss_falls_on_real_pairs_with_language_ids(tokenizer, quickstart_records):
    model = _model(keras.optimizers.Adam(3e-3), vocabulary_size=tokenizer.vocabulary_size)
    data = iter(make_dataset([quickstart_records], tokenizer, batch_size=16, max_tokens=48, features=model.input_features))
    step = tf.function(model.train_step, reduce_retracing=True)
    logs = []
    for _ in range(60):
        model.reset_metrics()
        logs.append({k: float(v) for k, v in step(next(data)).items()})
    for part in ("xtr_loss", "contrastive_loss"):
        assert np.mean([log[part] for log in logs[-10:]]) < 0.8 * np.mean([log[part] for log in logs[:5]]), part


def test_a_vocabulary_without_language_tokens_trains_a_row_per_language(quickstart_records, tmp_path):
    """XLM-R's vocabulary has no `<2xx>` tokens: u_la comes from a table of `max_languages` rows (not one per
    token), indexed by the corpus's languages in sorted order; only the rows of the batch's languages learn."""
    from pretrained_checkpoints import e5_like
    from tf_msemb.models.pretrained import load_pretrained

    tokenizer, encoder = load_pretrained(e5_like(tmp_path / "e5"))
    assert tokenizer.vocabulary_size > 8
    model = EMS(encoder, language_dim=6, contrastive_dim=8, max_languages=8, run=RunFacts(tokenizer=tokenizer))
    model.build()
    assert model.language_table.embeddings.shape == (8, 6)
    data = next(iter(make_dataset([quickstart_records], tokenizer, batch_size=16, max_tokens=tokenizer.max_length,
                                  features=model.input_features)))
    languages = ["de", "en", "es", "fr"]  # the quickstart corpus: en-de, en-es, en-fr
    assert set(data["src_lang_id"].numpy()) == {languages.index("en")}
    used = set(data["src_lang_id"].numpy()) | set(data["tgt_lang_id"].numpy())
    with tf.GradientTape() as tape:
        xtr_loss, _ = model.losses_for(data)
    gradient = tf.convert_to_tensor(tape.gradient(xtr_loss, model.language_table.embeddings)).numpy()
    assert {int(i) for i in np.flatnonzero(np.abs(gradient).max(axis=1))} == used


def _xtr_gradients(model, data):
    with tf.GradientTape() as tape:
        xtr_loss, _ = model.losses_for(data)
    return dict(zip([w.path for w in model.trainable_variables],
                    tape.gradient(xtr_loss, model.trainable_variables)))


@pytest.mark.parametrize("shared", [False, True])
def test_share_output_embedding_trains_the_input_table_through_xtr(shared):
    """With `share L_emb params` XTR's softmax reaches every row of the input table; without, only the input's rows."""
    model = _model(keras.optimizers.SGD(0.0), dropout=0.0, share_output_embedding=shared)
    data = _batch(np.random.default_rng(2))
    gradients = _xtr_gradients(model, data)
    table = tf.convert_to_tensor(gradients[model.encoder.backbone.token_embedding.embeddings.path])
    seen = np.unique(np.concatenate([data[s]["token_ids"].ravel() for s in ("src", "tgt")]))
    unseen = np.setdiff1d(np.arange(VOCABULARY), seen)
    assert unseen.size and float(tf.reduce_max(tf.abs(tf.gather(table, seen)))) > 0
    assert (float(tf.reduce_min(tf.reduce_max(tf.abs(tf.gather(table, unseen)), axis=1))) > 0) == shared
    own_table = [path for path in gradients if "xtr_output_embedding" in path]
    assert own_table == ([] if shared else [model.xtr_output.kernel.path])
    for path in own_table:
        assert float(tf.reduce_max(tf.abs(gradients[path]))) > 0


def test_ignore_ids_come_from_the_tokenizer_and_keep_unk(tokenizer):
    model = EMS(SentenceEncoder(tokenizer.vocabulary_size, **TINY), run=RunFacts(tokenizer=tokenizer))
    assert model.ignore_ids == tuple(sorted({tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id}))
    assert tokenizer.unk_id not in model.ignore_ids and tokenizer.unk_id in tokenizer.special_ids


def _two_replica_step(strategy, make_model, batch):
    with strategy.scope():
        model = make_model()
    half = len(batch["src_lang_id"]) // 2

    def per_replica(context):
        start = half * context.replica_id_in_sync_group
        return tf.nest.map_structure(lambda t: t[start : start + half], batch)

    @tf.function
    def step(data):
        logs = strategy.run(model.train_step, args=(data,))
        return {k: strategy.reduce("MEAN", v, axis=None) for k, v in logs.items()}

    initial = [w.copy() for w in model.get_weights()]
    logs = step(strategy.experimental_distribute_values_from_function(per_replica))
    return {k: float(v) for k, v in logs.items()}, [after - before for after, before in zip(model.get_weights(), initial)]


@pytest.mark.slow
def test_per_replica_negatives_differ_from_gathered_ones_under_two_replicas(two_device_strategy):
    """`gather_negatives=False` is the paper's per-GPU batch: each replica's loss and gradient see only its half."""
    batch = _batch(np.random.default_rng(3))
    halves = [tf.nest.map_structure(lambda t, i=i: t[4 * i : 4 * i + 4], batch) for i in range(2)]

    def make(gather, optimizer=None):
        return lambda: _model(optimizer or keras.optimizers.SGD(1.0), dropout=0.0, xtr=False,
                              gather_negatives=gather)

    gathered, _ = _two_replica_step(two_device_strategy, make(True), batch)
    per_replica, update = _two_replica_step(two_device_strategy, make(False), batch)
    single = make(False)()
    full = float(single.losses_for(batch)[1])
    half_losses = [float(single.losses_for(h)[1]) for h in halves]
    assert gathered["contrastive_loss"] == pytest.approx(full, rel=1e-5)
    assert per_replica["contrastive_loss"] == pytest.approx(np.mean(half_losses), rel=1e-5)
    assert abs(per_replica["contrastive_loss"] - gathered["contrastive_loss"]) > 0.1
    # SGD(1) on the mean of the two replicas' losses: the mean of one-device steps on each half.
    half_updates = []
    for h in halves:
        model = make(False)()
        initial = [w.copy() for w in model.get_weights()]
        tf.function(model.train_step)(h)
        half_updates.append([after - before for after, before in zip(model.get_weights(), initial)])
    for got, first, second in zip(update, *half_updates):
        np.testing.assert_allclose(got, (first + second) / 2, rtol=1e-5, atol=1e-5)
