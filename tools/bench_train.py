"""Training throughput (translation pairs per second) and peak RSS of a recipe.

    python tools/bench_train.py --gin_file=configs/distill_minilm_multi30k.gin \
        --batch_size=64 --steps=40 [--variant=precomputed --variant=live] \
        [--live_corpus=runs/multi30k/records/multi30k.manifest.json]

Each variant runs in its own process (so peak RSS is its own): `precomputed`
is the config as written; `live` binds a live teacher
(`MultilingualDistillation.teacher`) and reads `--live_corpus` (records
without teacher vectors). The rate excludes start-up and tracing (it starts
after the first logged step). Extra `--gin_param`s apply to every variant.
"""

import json
import resource
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

flags.DEFINE_multi_string("gin_file", [], "Recipe(s) to benchmark.")
flags.DEFINE_multi_string("gin_param", [], "Extra bindings for every variant.")
flags.DEFINE_integer("batch_size", 64, "Global batch size (translation pairs per step).")
flags.DEFINE_integer("steps", 40, "Measured steps (after 10 warm-up steps).")
flags.DEFINE_multi_enum("variant", ["precomputed"], ["precomputed", "live"], "Teacher variants to run.")
flags.DEFINE_string("live_corpus", None, "Corpus without teacher vectors, for the live variant.")
flags.DEFINE_string("teacher", "all-MiniLM-L6-v2", "Teacher of the live variant.")
flags.DEFINE_bool("child", False, "Internal: run one variant in this process and print JSON.")
FLAGS = flags.FLAGS

WARMUP = 10


def _variant_bindings(variant):
    if variant == "precomputed":
        return []
    if not FLAGS.live_corpus:
        raise SystemExit("error: the live variant needs --live_corpus (records without teacher vectors)")
    return [
        f"MultilingualDistillation.teacher = '{FLAGS.teacher}'",
        "MultilingualDistillation.teacher_dim = None",
        f"make_dataset.corpora = ['{FLAGS.live_corpus}']",
    ]


def run_child():
    """Trains WARMUP + steps in this process; prints throughput and peak RSS as JSON."""
    from tf_msemb.training.config import parse_config
    from tf_msemb.training.trainer import train

    parse_config(FLAGS.gin_file, FLAGS.gin_param)
    with tempfile.TemporaryDirectory() as model_dir:
        result = train(
            model_dir,
            global_batch_size=FLAGS.batch_size,
            num_steps=WARMUP + FLAGS.steps,
            log_every=WARMUP,
            checkpoint_every=10**9,
            max_train_minutes=None,
        )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"pairs_per_second": result["pairs_per_second"], "peak_rss_mib": peak_mib}))


def main(argv):
    del argv
    if FLAGS.child:
        run_child()
        return
    rows = []
    for variant in FLAGS.variant:
        command = [sys.executable, __file__, "--child", f"--batch_size={FLAGS.batch_size}", f"--steps={FLAGS.steps}"]
        command += [f"--gin_file={f}" for f in FLAGS.gin_file]
        command += [f"--gin_param={b}" for b in FLAGS.gin_param + _variant_bindings(variant)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"error: variant {variant} failed:\n{result.stderr[-2000:]}")
        rows.append((variant, json.loads(result.stdout.strip().splitlines()[-1])))
    print(f"{'variant':<14} {'batch':>6} {'pairs/s':>9} {'peak RSS MiB':>13}")
    for variant, r in rows:
        print(f"{variant:<14} {FLAGS.batch_size:>6} {r['pairs_per_second']:>9.1f} {r['peak_rss_mib']:>13.0f}")


if __name__ == "__main__":
    app.run(main)
