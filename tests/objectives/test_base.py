"""Every objective round-trips through `get_config` / `from_config`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.objectives import base
from tf_msemb.objectives.bidirectional_dual_encoder import BidirectionalDualEncoder
from tf_msemb.objectives.dual_momentum_contrast import DualMomentumContrast
from tf_msemb.objectives.ema_teacher_distillation import EMATeacherDistillation
from tf_msemb.objectives.ems import EMS
from tf_msemb.objectives.multilingual_distillation import MultilingualDistillation
from tf_msemb.objectives.siamese_similarity import SiameseSimilarity
from tf_msemb.objectives.translation_ranking import TranslationRanking

CASES = [
    (TranslationRanking, dict(scale=10.0, margin=0.1)),
    (BidirectionalDualEncoder, dict(scale=20.0, margin=0.3, num_hard_negatives=2, length_penalty=0.01,
                                    scoring="dot", bidirectional=False)),
    (DualMomentumContrast, dict(separate_encoders=True, momentum=0.9, queue_size=32, temperature=0.05,
                                in_batch_negatives=True, nli_weight=0.1, nli_path="nli.jsonl", nli_batch_size=8, nli_hidden=16,
                                nli_dropout=0.2)),
    (EMS, dict(xtr=True, language_embedding=False, language_dim=8, contrastive="ams", contrastive_mlp=True,
               contrastive_dim=8, temperature=0.2, margin=0.2, gather_negatives=False, share_output_embedding=True,
               ignore_ids=[0, 2])),
    (EMATeacherDistillation, dict(total_steps=7, tau_base=0.9, schedule="constant", frozen=True)),
    (MultilingualDistillation, dict(teacher=None, teacher_dim=24, projection="dense")),
    (SiameseSimilarity, dict(task="nli", num_labels=3)),
]


@pytest.mark.parametrize("cls, options", CASES, ids=[c.__name__ for c, _ in CASES])
def test_config_round_trip(cls, options):
    encoder = SentenceEncoder(vocabulary_size=40, max_sequence_length=8, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=16)
    model = cls(encoder, **options)
    config = model.get_config()
    for key, value in options.items():
        assert config[key] == value, key
    assert config["encoder"]["config"]["hidden_dim"] == 16  # the student, not a projection around it
    clone = cls.from_config(config)
    assert clone.get_config() == config
    assert clone.encoder is not model.encoder
    assert [m.name for m in clone.metrics] == [m.name for m in model.metrics]


def test_report_pairs_values_with_trackers_by_name():
    encoder = SentenceEncoder(vocabulary_size=40, max_sequence_length=8, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=16)
    model = TranslationRanking(encoder)
    logs = model.report(accuracy=0.25, loss=2.0)  # any order
    assert {name: float(value) for name, value in logs.items()} == {"loss": 2.0, "accuracy": 0.25}
    with pytest.raises(ValueError, match=r"reports \['loss'\] but tracks \['accuracy', 'loss'\]"):
        model.report(loss=1.0)
    with pytest.raises(ValueError, match="reports"):
        model.report(loss=1.0, accuracy=0.5, recall=0.1)


def test_options_are_the_constructors_own_arguments():
    encoder = SentenceEncoder(vocabulary_size=40, max_sequence_length=8, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=16)
    model = BidirectionalDualEncoder(encoder, margin=0.2, name="bide")
    assert model.options == {"scale": 1.0, "temperature": None, "margin": 0.2, "num_hard_negatives": 0,
                             "length_penalty": 0.0, "scoring": "dot", "bidirectional": True}


def test_options_hold_the_values_gin_binds(clean_gin):
    """gin hands its bindings to `__init__`; exports' metadata must name them, not the defaults."""
    import gin

    gin.parse_config("MultilingualDistillation.teacher_dim = 24\nMultilingualDistillation.projection = 'error'\n"
                     "MultilingualDistillation.teacher_prompt = 'query: '\nMultilingualDistillation.ranking_weight = 0.05\n"
                     "D = 24\nTranslationRanking.scale = %D")
    encoder = SentenceEncoder(vocabulary_size=40, max_sequence_length=8, hidden_dim=24, num_layers=1, num_heads=2,
                              intermediate_dim=16)
    assert MultilingualDistillation(encoder).options == {"teacher": None, "teacher_dim": 24, "projection": "error",
                                                        "teacher_prompt": "query: ", "ranking_weight": 0.05,
                                                        "ranking_scale": 20.0, "ranking_margin": 0.3,
                                                        "ranking_queue_size": 0, "ranking_hard_negatives": 0,
                                                        "ranking_sources": False}
    assert MultilingualDistillation(encoder, teacher_dim=24, projection="dense").options["projection"] == "dense"
    assert TranslationRanking(encoder).options["scale"] == 24



def _one_step():
    """One TranslationRanking step on a fresh seeded encoder: the gradient types the optimizer got, the weights."""
    keras.utils.set_random_seed(3)
    encoder = SentenceEncoder(vocabulary_size=40, max_sequence_length=8, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=16, dropout=0.0)
    model = TranslationRanking(encoder)
    model.compile(optimizer=keras.optimizers.Adam(0.1, epsilon=1e-12))
    model.build()
    model.optimizer.build(model.trainable_variables)
    received = []
    apply = model.optimizer.apply

    def spy(gradients, variables):
        received.extend(type(g).__name__ for g in gradients)
        return apply(gradients, variables)

    model.optimizer.apply = spy
    ids = np.array([[1, 5, 7, 2, 0], [1, 9, 9, 9, 2], [1, 3, 2, 0, 0]], np.int32)
    side = {"token_ids": tf.constant(ids), "padding_mask": tf.constant(ids > 0)}
    table = encoder.backbone.token_embedding.embeddings
    before = table.numpy()
    model.train_step({"src": side, "tgt": side})
    return received, np.abs(table.numpy() - before)


def test_one_replica_steps_on_the_dense_embedding_gradient(monkeypatch):
    """The embedding table's gradient reaches the optimizer dense, so Adam's first step moves every row a token
    used by exactly the learning rate (m / sqrt(v) = g / |g|). Handed the `IndexedSlices`, Keras' Adam squares
    each occurrence of a repeated id apart (v = sum of g_i^2, not (sum of g_i)^2), and those rows (ids 1, 2, 9)
    move by other amounts."""
    used = [1, 2, 3, 5, 7, 9]
    received, moved = _one_step()
    assert "IndexedSlices" not in received and len(received) > 5
    np.testing.assert_allclose(moved[used], 0.1, rtol=1e-3)
    np.testing.assert_allclose(np.delete(moved, used, axis=0), 0.0)
    monkeypatch.setattr(base, "_dense", lambda gradient: gradient)
    received, moved = _one_step()
    assert "IndexedSlices" in received
    assert np.abs(moved[[1, 2, 9]] - 0.1).max() > 0.02
