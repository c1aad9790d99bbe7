"""Writes an export whose vectors lie on their principal axes, so a cut to fewer dimensions keeps the most.

    python tools/principal_axes.py --model=runs/recipe/export/best \
        --corpus=runs/multi30k/records/multi30k.manifest.json --corpus=runs/stsb/records/stsb.manifest.json \
        --output=runs/recipe/export/best_axes [--per_language=1000] [--output_dim=128]

The export's vectors of up to `--per_language` distinct sentences of each
language of each corpus (both sides of every pair, sampled with `--seed`;
`--languages` keeps some only; every corpus an equal share)
set an orthogonal rotation R (`models.heads.PrincipalAxes`: the eigenvectors
of their second-moment matrix, largest first), and the new export serves
`x R`. Every cosine at full width stays as it was (R is a rotation); cut to
d dimensions (`--output_dim`, `dev_table --widths`, sentence-transformers'
`truncate_dim`) the vectors keep the d-dimensional subspace with the most
of their energy instead of whichever d the model happened to put first:
for a model trained without `train.matryoshka_widths`. Sample the
sentences the model will serve (its training corpora, every language),
never a dev or test set: the axes follow the sample's domain. The axes
are then turned (`--turn_steps`; still a rotation) to keep, at each of
`--turn_widths`, the cosines of the whole vectors between the sample's
sentences and among each one's nearest neighbours
(`training.nested_rotation`, after Matryoshka-Adaptor): the principal axes
keep the most energy, the turned ones the most of the geometry. The new
export is float32 (re-export int8 from it); its metadata's provenance
records the sample and the energy each width keeps.
"""

import os
import random

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.data.corpora import record_pairs
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.export.reload import keras_parts
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.export.saved_model import resolve_export
from tf_msemb.models.heads import PrincipalAxes
from tf_msemb.text_files import CorpusError
from tf_msemb.training.nested_rotation import fit_nested_rotation

flags.DEFINE_string("model", None, "The export (or a training model_dir: its export/final) to rotate.")
flags.DEFINE_multi_string("corpus", [], "Manifest of records whose sentences set the axes (repeat for several).")
flags.DEFINE_integer("per_language", 1000, "Distinct sentences sampled from each language of each corpus.")
flags.DEFINE_list("languages", [], "Sample these languages of the corpora only (default: every one).")
flags.DEFINE_integer("seed", 0, "Seed of the sample.")
flags.DEFINE_integer("turn_steps", 500, "Then turn the axes this many Adam steps so cut vectors keep the whole "
                     "vectors' cosines (training.nested_rotation; 0: the principal axes as they are).")
flags.DEFINE_list("turn_widths", [], "The cut widths whose cosines the turn keeps (default: those of 256, 128 "
                  "and 64 below the vectors' width; none: no turn).")
flags.DEFINE_integer("output_dim", None, "Also cut the new export's vectors to this many dimensions.")
flags.DEFINE_string("output", None, "Where the new export goes.")
flags.mark_flags_as_required(["model", "corpus", "output"])
FLAGS = flags.FLAGS

# The widths whose kept energy the metadata records (those below the model's own width).
REPORTED_WIDTHS = (512, 256, 128, 64, 32)
# The widths the turn keeps by default (those below the model's own width).
TURN_WIDTHS = (256, 128, 64)


def sample_sentences(corpora, per_language, seed, languages=()):
    """`{lang: sentences}`: up to `per_language` distinct sentences of each language of each of `corpora` (of
    `languages` only, when given), seeded: every corpus an equal share, as the training mixture gives it."""
    rng, sample, found = random.Random(seed), {}, set()
    for corpus in corpora:
        by_language = {}
        for src_lang, tgt_lang, rows in record_pairs(corpus):
            for lang, side in ((src_lang, 0), (tgt_lang, 1)):
                if not languages or lang in languages:
                    by_language.setdefault(lang, set()).update(row[side] for row in rows if row[side])
        for lang, sentences in sorted(by_language.items()):
            found.add(lang)
            sentences = sorted(sentences.difference(sample.get(lang, ())))
            sample.setdefault(lang, []).extend(rng.sample(sentences, min(per_language, len(sentences))))
    missing = [lang for lang in languages if lang not in found]
    if missing:
        raise CorpusError(f"--languages names {', '.join(missing)}, which {', '.join(corpora)} do not hold.")
    return dict(sorted(sample.items()))


def main(argv):
    del argv
    source = resolve_export(FLAGS.model)
    tokenizer, encoder, metadata = keras_parts(source)
    if metadata.get("embedding_dim") != metadata.get("full_embedding_dim"):
        raise CorpusError(f"{source} serves its vectors cut to {metadata.get('embedding_dim')} of "
                          f"{metadata.get('full_embedding_dim')} dimensions: turn its full-width export instead "
                          "(and cut the new one with --output_dim).")
    sample = sample_sentences(FLAGS.corpus, FLAGS.per_language, FLAGS.seed, FLAGS.languages)
    sentences = [sentence for found in sample.values() for sentence in found]
    if len(sentences) < encoder.output_dim:
        raise CorpusError(f"{len(sentences)} sentences in {', '.join(FLAGS.corpus)}: the axes of "
                          f"{encoder.output_dim}-dimensional vectors need at least {encoder.output_dim}.")
    print(f"{len(sentences)} sentences: " + ", ".join(f"{lang} {len(found)}" for lang, found in sample.items()))
    vectors = encode(load_model(source), sentences)
    axes = PrincipalAxes(encoder, name="principal_axes")
    eigenvalues = axes.adapt(vectors)
    kept = {width: float(eigenvalues[:width].sum() / eigenvalues.sum())
            for width in REPORTED_WIDTHS if width < encoder.output_dim}
    print("Energy kept: " + ", ".join(f"{width} dims {share:.1%}" for width, share in kept.items()))
    turn = None
    widths = [int(width) for width in FLAGS.turn_widths] or [w for w in TURN_WIDTHS if w < encoder.output_dim]
    if any(not 0 < width < encoder.output_dim for width in widths):
        raise CorpusError(f"--turn_widths={','.join(FLAGS.turn_widths)}: each must lie below the vectors' "
                          f"{encoder.output_dim} dimensions.")
    if FLAGS.turn_steps and widths:
        rotation, before, after = fit_nested_rotation(vectors, axes.projection.kernel.numpy(), widths,
                                                      steps=FLAGS.turn_steps, seed=FLAGS.seed, verbose=True)
        axes.assign_rotation(rotation)
        print(f"Nested similarity loss on the sample: {before:.4f} on the axes, {after:.4f} turned")
        turn = {"steps": FLAGS.turn_steps, "widths": widths, "loss_axes": round(before, 5),
                "loss_turned": round(after, 5)}
    provenance = dict(metadata.get("provenance") or {})
    if provenance.get("operative_config"):
        provenance["operative_config"] = os.path.join(source, provenance["operative_config"])
    provenance["principal_axes"] = {
        "rotated_export": os.path.basename(os.path.normpath(source)),
        "corpora": [os.path.basename(corpus) for corpus in FLAGS.corpus],
        "sentences": {lang: len(found) for lang, found in sample.items()},
        "seed": FLAGS.seed,
        "energy_kept": {str(width): round(share, 4) for width, share in kept.items()},
        "turned": turn,
    }
    export_saved_model(tokenizer, axes, FLAGS.output, step=metadata.get("training_step"),
                       objective=metadata.get("objective"), selection=metadata.get("selection"),
                       provenance=provenance, output_dim=FLAGS.output_dim)
    print(f"Export on its principal axes in {FLAGS.output}")


if __name__ == "__main__":
    cli.run(main)
