"""Benchmark pools for mining at scale, drawn from a model fitted to an export's vectors of real translations.

    python tools/benchmarks/make_scale_pools.py --model=runs/e5-f32 \
        --corpus=runs/multi30k/records/multi30k.manifest.json --pair=en-de \
        --output_dir=runs/scale_pools --size=1000000 --size=10000000

Encodes the corpus' pairs of `--pair` (cached in `--cache_dir`, named as
`tools/mine_hard_negatives.py` names them, so its cache serves), prints how
the fitted `tf_msemb.mining.synthetic.PairModel` compares with held-out real
pairs (quantiles of the nearest-neighbour cosines mining sees), then writes
`<output_dir>/n<size>/` for each size: `x.npy`, `y.npy` (float16),
`pairs.npy` (planted translations) and `pools.json`.
"""

import os

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import numpy as np
from absl import flags

from tf_msemb.data.corpora import record_pairs
from tf_msemb.evaluation.embedding_cache import cached_embeddings
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.encoding import resolve_export
from tf_msemb.mining import synthetic
from tf_msemb.text_files import CorpusError

flags.DEFINE_string("model", None, "Export whose vectors the pools imitate.")
flags.DEFINE_string("corpus", None, "Records manifest holding the real pairs.")
flags.DEFINE_string("pair", "en-de", "The language pair of the corpus to fit, src-tgt.")
flags.DEFINE_string("output_dir", "runs/scale_pools", "Where the model and the pools go.")
flags.DEFINE_string("cache_dir", None, "Embedding cache (default: <output_dir>/real).")
flags.DEFINE_multi_integer("size", [1_000_000], "Sentences a side of each pool written.")
flags.DEFINE_float("planted", 0.5, "Share of targets that translate a source.")
flags.DEFINE_integer("cells", 1024, "Mixture cells of the model.")
flags.DEFINE_integer("rank", 12, "Principal directions per cell.")
flags.DEFINE_integer("seed", 0, "Seed of the fit and the pools.")
flags.mark_flags_as_required(["model", "corpus"])
FLAGS = flags.FLAGS


def real_pairs():
    """The export's aligned vectors `(x, y)` of the corpus' `--pair` pairs (all sources, each target once cached)."""
    src_lang, _, tgt_lang = FLAGS.pair.partition("-")
    found = {(s, t): rows for s, t, rows in record_pairs(FLAGS.corpus)}
    if (src_lang, tgt_lang) not in found:
        raise CorpusError(f"{FLAGS.corpus} has no {FLAGS.pair} pairs; it has {sorted('-'.join(p) for p in found)}.")
    rows = [(src.strip(), tgt.strip()) for src, tgt in found[src_lang, tgt_lang] if src.strip() and tgt.strip()]
    sources = [src for src, _ in rows]
    targets = list(dict.fromkeys(tgt for _, tgt in rows))
    export = resolve_export(FLAGS.model)
    model = load_model(export)
    cache_dir = FLAGS.cache_dir or os.path.join(FLAGS.output_dir, "real")
    x, y = (cached_embeddings(model, sentences, os.path.join(cache_dir, f"{FLAGS.pair}.{side}.float16.npy"),
                              model_id=export)
            for side, sentences in (("src", sources), ("tgt", targets)))
    where = {target: row for row, target in enumerate(targets)}
    return np.asarray(x, np.float32), np.asarray(y, np.float32)[[where[tgt] for _, tgt in rows]]


def main(argv):
    del argv
    x, y = real_pairs()
    options = {"cells": FLAGS.cells, "rank": FLAGS.rank}
    real, drawn = synthetic.fit_check(x, y, seed=FLAGS.seed, **options)
    size = round(0.2 * len(x))
    print(f"\nHeld-out real pairs against drawn pairs ({size:,} a side; quantiles {synthetic.QUANTILES}):\n")
    print("| statistic | real | drawn |\n|---|---|---|")
    for name, values in real.items():
        show = (lambda v: f"{v:.3f}") if name == "accuracy" else (lambda v: " / ".join(f"{q:.3f}" for q in v))
        print(f"| {name} | {show(values)} | {show(drawn[name])} |")
    model = synthetic.fit_pair_model(x, y, seed=FLAGS.seed, **options)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    model.save(os.path.join(FLAGS.output_dir, "model.npz"))
    for n in FLAGS.size:
        directory = os.path.join(FLAGS.output_dir, f"n{n}")
        print(f"\nWriting {n:,} a side to {directory}")
        synthetic.write_pools(model, n, directory, FLAGS.planted, FLAGS.seed, verbose=True)


if __name__ == "__main__":
    cli.run(main)
