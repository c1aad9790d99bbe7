"""Training throughput (translation pairs per second) and peak RSS of a recipe, beside sentence-transformers.

    python tools/benchmarks/bench_train.py --gin_file=configs/distill_minilm_multi30k.gin \
        --batch_size=64 --steps=40 [--variant=precomputed --variant=live] \
        [--live_corpus=runs/multi30k/records/multi30k.manifest.json] [--peer_python=/path/to/python]

Each variant runs in its own process (so peak RSS is its own): `precomputed`
is the config as written; `live` binds a live teacher
(`MultilingualDistillation.teacher`) and reads `--live_corpus` (records
without teacher vectors). The rate excludes start-up and tracing (it starts
after the first logged step). Extra `--gin_param`s apply to every variant.
`--intra_op_threads` may repeat: a row of each variant per setting.
`--grad_cache_chunk` may repeat too: a row per chunk size, 0 for the plain
step (`train.gradient_cache_chunk`, objectives with in-batch negatives).
`--row=LABEL:BINDING[;BINDING...]` may repeat: a row per entry with those
extra bindings (switches side by side against one peer run):

    python tools/benchmarks/bench_train.py --gin_file=configs/distill_e5small.gin --row=dense: \
        --row='touched rows:make_optimizer.embedding_update = "touched_rows"' \
        --row='frozen:train.frozen_embeddings = True' --peer_model=runs/e5-small

or, for gradient caching:

    python tools/benchmarks/bench_train.py --gin_file=configs/bide_ams.gin --batch_size=1024 \
        --steps=3 --warmup=2 --grad_cache_chunk=0 --grad_cache_chunk=128 --peer=false

When `--peer_python` (default: this interpreter) has the optional `bench`
extra, the same recipe also runs in sentence-transformers
(`peer_sentence_transformers.py train`: all-MiniLM-L6-v2 student,
`losses.MSELoss`, AdamW, same batch size) on pairs and teacher vectors read
from the recipe's corpus (`make_dataset.corpora`, round-robin over its
language pairs), and the table adds its row and the ratio.
"""

import json
import os
import sys
import tempfile

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

from absl import flags

from tf_msemb.interpreter import run_json
from traffic import peak_rss_mib
from peer import missing_note
from peer import packaged_minilm
from peer import peer_available
from peer import ratio
from peer import run_peer

flags.DEFINE_multi_string("gin_file", [], "Recipe(s) to benchmark.")
flags.DEFINE_multi_string("gin_param", [], "Extra bindings for every variant.")
flags.DEFINE_integer("batch_size", 64, "Global batch size (translation pairs per step).")
flags.DEFINE_integer("steps", 40, "Measured steps (after the warm-up steps).")
flags.DEFINE_integer("warmup", 10, "Steps before the measured ones (tracing, first allocations); at least 1.")
flags.DEFINE_multi_integer("grad_cache_chunk", None, "Rows per forward of a gradient-cached step (0: the plain "
                           "step); repeat for a row per setting. Unset: the recipe's own train.gradient_cache_chunk.")
flags.DEFINE_multi_string("row", None, "LABEL:BINDING[;BINDING...]: a row (of each variant and setting) with "
                          "these extra bindings; repeat for several. Unset: one row, the recipe as written.")
flags.DEFINE_multi_enum("variant", ["precomputed"], ["precomputed", "live"], "Teacher variants to run.")
flags.DEFINE_string("live_corpus", None, "Corpus without teacher vectors, for the live variant.")
flags.DEFINE_string("teacher", "all-MiniLM-L6-v2", "Teacher of the live variant.")
flags.DEFINE_multi_integer("intra_op_threads", [0], "TensorFlow threads inside one op (0: default); repeat for a "
                           "row of each variant per setting.")
flags.DEFINE_string("peer_python", sys.executable, "Interpreter with the `bench` extra for the peer side.")
flags.DEFINE_string("peer_model", None, "sentence-transformers student (default: packaged all-MiniLM-L6-v2).")
flags.DEFINE_bool("peer", True, "Run the sentence-transformers side when it is installed.")
flags.DEFINE_bool("child", False, "Internal: run one variant in this process and print JSON.")
FLAGS = flags.FLAGS


def _variant_bindings(variant):
    if variant == "precomputed":
        return []
    if not FLAGS.live_corpus:
        raise ValueError("the live variant needs --live_corpus (records without teacher vectors)")
    return [
        f"MultilingualDistillation.teacher = '{FLAGS.teacher}'",
        "MultilingualDistillation.teacher_dim = None",
        f"make_dataset.corpora = ['{FLAGS.live_corpus}']",
    ]


def _extra_rows(specs):
    """`[(label, [binding, ...])]` of `--row` values (`LABEL:BINDING;BINDING`); one unlabelled row without any."""
    rows = []
    for spec in specs or []:
        label, colon, bindings = spec.partition(":")
        if not colon or not label.strip():
            raise ValueError(f"--row={spec!r} is not LABEL:BINDING[;BINDING...] (the label before the first colon)")
        rows.append((label.strip(), [b.strip() for b in bindings.split(";") if b.strip()]))
    return rows or [("", [])]


def run_child():
    """Trains warm-up + measured steps in this process; prints throughput and peak RSS as JSON."""
    from tf_msemb.config import parse_config
    from tf_msemb.runtime import set_threads
    from tf_msemb.training.trainer import train

    set_threads(FLAGS.intra_op_threads[0])
    parse_config(FLAGS.gin_file, FLAGS.gin_param)
    # Passed only when asked for: an explicit argument would hide the recipe's own binding.
    cache = {} if FLAGS.grad_cache_chunk is None else {"gradient_cache_chunk": FLAGS.grad_cache_chunk[0] or None}
    with tempfile.TemporaryDirectory() as model_dir:
        result = train(
            model_dir,
            **cache,
            global_batch_size=FLAGS.batch_size,
            num_steps=FLAGS.warmup + FLAGS.steps,
            log_every=FLAGS.warmup,
            checkpoint_every=10**9,
            max_train_minutes=None,
            evaluators=(),  # training alone: the recipe's dev evaluation would add its time and memory
            best_metric=None,
        )
    peak_mib = peak_rss_mib()
    print(json.dumps({"pairs_per_second": result["pairs_per_second"], "peak_rss_mib": peak_mib}))


def _peer_pairs(path, count):
    """Writes `count` pairs with teacher vectors from the recipe's corpus to a jsonl file (round-robin over pairs).

    Returns False (writing nothing) for a recipe without precomputed teacher vectors.
    """
    import gin
    import tensorflow as tf

    from tf_msemb.data.corpora import corpus_streams
    from tf_msemb.data.features import TeacherVectors
    from tf_msemb.data.records import parse_examples
    from tf_msemb.config import parse_config

    parse_config(FLAGS.gin_file, FLAGS.gin_param)
    try:
        corpora = gin.query_parameter("make_dataset.corpora")
        dim = gin.query_parameter("MultilingualDistillation.teacher_dim")
    except ValueError:
        return False
    finally:
        gin.clear_config()
    streams = [files for corpus in corpora for files, _ in corpus_streams(corpus).values()]
    per_stream = -(-count // len(streams))
    columns = []
    for files in streams:
        records = tf.data.TFRecordDataset(files).take(per_stream).batch(per_stream)
        features = parse_examples(next(iter(records)), [TeacherVectors(dim)])
        columns.append([
            {"src": s.decode(), "tgt": t.decode(), "teacher": v.tolist()}
            for s, t, v in zip(features["src"].numpy(), features["tgt"].numpy(), features["teacher"].numpy())
        ])
    rows = [row for group in zip(*columns) for row in group][:count]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return True


def main(argv):
    del argv
    if FLAGS.child:
        run_child()
        return
    if FLAGS.warmup < 1:
        raise ValueError(f"--warmup={FLAGS.warmup}: the rate starts after the first logged step, so at least 1.")
    rows = []
    settings = list(dict.fromkeys(FLAGS.intra_op_threads))
    chunks = list(dict.fromkeys(FLAGS.grad_cache_chunk or [None]))
    for variant in FLAGS.variant:
        for label, bindings in _extra_rows(FLAGS.row):
            for threads in settings:
                for chunk in chunks:
                    command = [__file__, "--child", f"--batch_size={FLAGS.batch_size}",
                               f"--steps={FLAGS.steps}", f"--warmup={FLAGS.warmup}", f"--intra_op_threads={threads}"]
                    command += [] if chunk is None else [f"--grad_cache_chunk={chunk}"]
                    command += [f"--gin_file={f}" for f in FLAGS.gin_file]
                    command += [f"--gin_param={b}" for b in FLAGS.gin_param + _variant_bindings(variant) + bindings]
                    name = variant + (f" {label}" if label else "")
                    name += f" intra {threads or 'TF'}" if settings != [0] else ""
                    name += "" if chunk is None else f" cached {chunk}" if chunk else " plain"
                    rows.append((name, run_json(command, f"variant {name}")))
    if FLAGS.peer and peer_available(FLAGS.peer_python):
        with tempfile.TemporaryDirectory() as work:
            pairs = os.path.join(work, "pairs.jsonl")
            if _peer_pairs(pairs, (FLAGS.warmup + FLAGS.steps) * FLAGS.batch_size):
                theirs = run_peer(FLAGS.peer_python, "train", f"--model={FLAGS.peer_model or packaged_minilm()}",
                                  f"--pairs={pairs}", f"--batch_size={FLAGS.batch_size}", f"--steps={FLAGS.steps}",
                                  f"--warmup={FLAGS.warmup}")
                rows.append(("sentence-transformers", theirs))
            else:
                print("(sentence-transformers side skipped: the recipe has no precomputed teacher vectors)")
    elif FLAGS.peer:
        print(missing_note(FLAGS.peer_python))
    width = max(32, *(len(name) + 1 for name, _ in rows))
    print(f"{'variant':<{width}} {'batch':>6} {'pairs/s':>9} {'peak RSS MiB':>13}")
    for variant, r in rows:
        print(f"{variant:<{width}} {FLAGS.batch_size:>6} {r['pairs_per_second']:>9.1f} {r['peak_rss_mib']:>13.0f}")
    if rows[-1][0] == "sentence-transformers":
        theirs = rows[-1][1]["pairs_per_second"]
        for variant, r in rows[:-1]:
            print(f"ratio {variant} / sentence-transformers: {ratio(r['pairs_per_second'], theirs)}")


if __name__ == "__main__":
    cli.run(main)
