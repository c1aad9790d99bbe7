"""Adds teacher-space hard negatives to a corpus that has teacher vectors (for ranking against the teacher).

    python tools/mine_teacher_negatives.py \
        --manifest=runs/e5-small-teacher/multi30k/multi30k.manifest.json \
        --output_dir=runs/e5-small-teacher/multi30k_negatives --num_negatives=4

Each record gets `teacher_negatives`: the stored teacher vectors of the
`--num_negatives` sources nearest its own in the teacher's space (the
corpus' distinct sources, all language pairs together), skipping the source
itself and any whose cosine with it reaches `--ceiling`. No model runs: the
vectors are the ones `tools/precompute_teacher.py` stored. Train on the new
manifest with `MultilingualDistillation.ranking_hard_negatives =
<--num_negatives>`. Finished shards are kept, so the same command started
again after an interruption continues.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.data.teacher_vectors import NeighbourSearch
from tf_msemb.data.teacher_vectors import add_teacher_negatives
from tf_msemb.evaluation import search

flags.DEFINE_string("manifest", None, "Manifest of a corpus with teacher vectors (tools/precompute_teacher.py).")
flags.DEFINE_string("output_dir", None, "Where the extended shards and manifest go.")
flags.DEFINE_integer("num_negatives", 4, "Teacher negatives per record.")
flags.DEFINE_integer("candidates", 20, "Nearest sources searched per source, out of which the negatives are kept.")
flags.DEFINE_float("ceiling", 0.95, "Sources whose teacher cosine with the record's source reaches this are its "
                   "near-duplicates, never negatives.")
flags.DEFINE_integer("chunk_size", 50_000, "Sources per search chunk.")
flags.mark_flags_as_required(["manifest", "output_dir"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    if FLAGS.candidates <= FLAGS.num_negatives:
        raise ValueError(f"--candidates={FLAGS.candidates} must exceed --num_negatives={FLAGS.num_negatives}: "
                         "each source finds itself first.")

    def exact(queries, pool, k):
        return search.knn(queries, pool, k, "exact", FLAGS.chunk_size)  # the chunk size changes no answer

    manifest = add_teacher_negatives(FLAGS.manifest, FLAGS.output_dir, FLAGS.num_negatives, FLAGS.ceiling,
                                     NeighbourSearch(exact, FLAGS.candidates, "exact"))
    print(f"Teacher negatives added; manifest in {FLAGS.output_dir}/{manifest['prefix']}.manifest.json")


if __name__ == "__main__":
    cli.run(main)
