"""Every objective round-trips through `get_config` / `from_config`."""

import pytest

from tf_msemb.models.encoder import SentenceEncoder
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
                     "D = 24\nTranslationRanking.scale = %D")
    encoder = SentenceEncoder(vocabulary_size=40, max_sequence_length=8, hidden_dim=24, num_layers=1, num_heads=2,
                              intermediate_dim=16)
    assert MultilingualDistillation(encoder).options == {"teacher": None, "teacher_dim": 24, "projection": "error"}
    assert MultilingualDistillation(encoder, teacher_dim=24, projection="dense").options["projection"] == "dense"
    assert TranslationRanking(encoder).options["scale"] == 24
