"""Adds hard negatives mined with a previous model to a parallel corpus (seed 004 Sec. 4.2: 5 per pair).

    python tools/mine_hard_negatives.py --model=runs/bide_ams \
        --corpus=runs/multi30k/records/multi30k.manifest.json \
        --output_dir=runs/multi30k/hard --prefix=multi30k_hard --num_negatives=5

or, from line-aligned text, `--src=train.en --tgt=train.de --src_lang=en --tgt_lang=de`.
For every pair, its source is searched among the distinct targets of its
language pair (`--index`: exact, or faiss' flat/ivf/ivfpq/hnsw); of the
`--candidates` nearest, the true translation and every target whose cosine
with it reaches `--ceiling` (its near-duplicates) are skipped and the next
`--num_negatives` kept (see `tf_msemb.data.hard_negatives`). Pairs with too
few are dropped and counted. Writes TFRecords with the `hard_negatives`
field and a manifest; train on it with
`BidirectionalDualEncoder.num_hard_negatives = <--num_negatives>`.
Embeddings are cached and pairs searched `--chunk_size` at a time, each
chunk's result saved: the same command started again after an
interruption continues where it stopped.
"""

import functools
import hashlib
import json
import os

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import numpy as np
from absl import flags

from tf_msemb.data.corpora import record_pairs
from tf_msemb.data.hard_negatives import NO_NEGATIVES
from tf_msemb.data.hard_negatives import mine_hard_negatives
from tf_msemb.data.hard_negatives import translations_of_sources
from tf_msemb.data.readers import aligned_pairs
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.evaluation import search
from tf_msemb.evaluation.embedding_cache import DTYPES
from tf_msemb.evaluation.embedding_cache import cached_embeddings
from tf_msemb.evaluation.embedding_cache import fingerprint
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.encoding import resolve_export
from tf_msemb.text_files import CorpusError

flags.DEFINE_string("model", None, "Export directory or training model_dir of the previous model.")
flags.DEFINE_string("corpus", None, "TFRecords: a manifest from make_tfrecords.py or a shard glob.")
flags.DEFINE_string("src", None, "Instead of --corpus: source-language text file, line-aligned with --tgt.")
flags.DEFINE_string("tgt", None, "Target-language text file, line-aligned with --src.")
flags.DEFINE_string("src_lang", None, "Language tag of --src.")
flags.DEFINE_string("tgt_lang", None, "Language tag of --tgt.")
flags.DEFINE_string("output_dir", None, "Directory for the shards with hard negatives and their manifest.")
flags.DEFINE_string("prefix", "hard", "File name prefix of the shards and the manifest.")
flags.DEFINE_integer("num_shards", 4, "Shards per language pair.")
flags.DEFINE_integer("num_negatives", 5, "Hard negatives per pair (5 in seed 004).")
flags.DEFINE_integer("candidates", 20, "Nearest targets searched per pair, out of which the negatives are kept.")
flags.DEFINE_float("ceiling", 0.95, "Targets whose cosine with the true translation reaches this are its "
                   "near-duplicates, never negatives.")
flags.DEFINE_enum("index", "exact", list(search.INDEXES), "Search: exact (TensorFlow) or faiss flat/ivf/ivfpq/hnsw.")
flags.DEFINE_integer("nprobe", 16, "Cells visited per query by the ivf indexes.")
flags.DEFINE_integer("pq_bytes", 48, "Bytes per vector of the ivfpq codes; must divide the embedding dim.")
flags.DEFINE_string("cache_dir", None, "Embeddings and finished chunks (default: <output_dir>/mining_cache).")
flags.DEFINE_enum("dtype", "float16", list(DTYPES), "Storage type of the cached embeddings.")
flags.DEFINE_integer("chunk_size", 50_000, "Pairs per encoding and search chunk.")
flags.DEFINE_integer("batch_size", 64, "Sentences per encoding batch.")
flags.mark_flags_as_required(["model", "output_dir"])
FLAGS = flags.FLAGS


def _sources():
    if FLAGS.corpus:
        if FLAGS.src or FLAGS.tgt:
            raise CorpusError("Give either --corpus or --src/--tgt, not both.")
        return record_pairs(FLAGS.corpus)
    if not (FLAGS.src and FLAGS.tgt and FLAGS.src_lang and FLAGS.tgt_lang):
        raise CorpusError("Nothing to read: give --corpus, or --src, --tgt, --src_lang and --tgt_lang.")
    if FLAGS.src_lang == FLAGS.tgt_lang:
        raise CorpusError(f"--src_lang and --tgt_lang are both {FLAGS.src_lang!r}; tag the two sides apart.")
    return aligned_pairs({FLAGS.src_lang: FLAGS.src, FLAGS.tgt_lang: FLAGS.tgt}, FLAGS.src_lang)


def _searcher(pool):
    """`queries -> (sims, ids)` of the `--candidates` nearest in `pool`; an approximate index is built once, if used."""
    if FLAGS.index in ("exact", "flat"):
        return lambda queries: search.knn(queries, pool, FLAGS.candidates, FLAGS.index, FLAGS.chunk_size)
    index = functools.cache(lambda: search.build_index(pool, FLAGS.index, pq_bytes=FLAGS.pq_bytes,
                                                       chunk_size=FLAGS.chunk_size, verbose=True))
    return lambda queries: search.search_index(index(), queries, FLAGS.candidates, nprobe=FLAGS.nprobe,
                                               chunk_size=FLAGS.chunk_size)


def _with_negatives(model, export, cache_dir, src_lang, tgt_lang, rows):
    """`(src_lang, tgt_lang, [(src, tgt, negative, ...)])` for the pairs that got enough negatives."""
    pair = f"{src_lang}-{tgt_lang}"
    rows = [(src.strip(), tgt.strip()) for src, tgt in rows if src.strip() and tgt.strip()]
    sources = [src for src, _ in rows]
    targets = list(dict.fromkeys(tgt for _, tgt in rows))
    print(f"{pair}: {len(rows)} pairs, {len(targets)} distinct targets")
    x, pool = [cached_embeddings(model, sentences, os.path.join(cache_dir, f"{pair}.{side}.{FLAGS.dtype}.npy"),
                                 FLAGS.dtype, FLAGS.chunk_size, FLAGS.batch_size, model_id=export)
               for side, sentences in (("src", sources), ("tgt", targets))]
    settings = {"model": export, "sources": fingerprint(sources), "targets": fingerprint(targets),
                "dtype": FLAGS.dtype, "k": FLAGS.num_negatives, "candidates": FLAGS.candidates,
                "ceiling": FLAGS.ceiling, "index": FLAGS.index, "nprobe": FLAGS.nprobe, "pq_bytes": FLAGS.pq_bytes,
                "chunk_size": FLAGS.chunk_size}
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    target_ids = {tgt: j for j, tgt in enumerate(targets)}
    true_ids = translations_of_sources(rows, target_ids)
    negatives = mine_hard_negatives(x, pool, true_ids, FLAGS.num_negatives, FLAGS.ceiling, _searcher(pool),
                                    os.path.join(cache_dir, f"{pair}.negatives-{digest}"), FLAGS.chunk_size)
    kept = [(src, tgt, *[targets[j] for j in chosen])
            for (src, tgt), chosen in zip(rows, negatives) if chosen[0] != NO_NEGATIVES]
    print(f"{pair}: {len(kept)} pairs with {FLAGS.num_negatives} hard negatives; {len(rows) - len(kept)} dropped "
          f"with fewer than {FLAGS.num_negatives} candidates below the ceiling {FLAGS.ceiling}")
    return src_lang, tgt_lang, kept


def main(argv):
    del argv
    if FLAGS.candidates <= FLAGS.num_negatives:
        raise ValueError(f"--candidates={FLAGS.candidates} must exceed --num_negatives={FLAGS.num_negatives}: "
                         "the true translation is among the candidates.")
    export = os.path.abspath(resolve_export(FLAGS.model))
    model = load_model(export)
    cache_dir = FLAGS.cache_dir or os.path.join(FLAGS.output_dir, "mining_cache")
    mined = (_with_negatives(model, export, cache_dir, *source) for source in _sources())
    write_tfrecords(mined, FLAGS.output_dir, FLAGS.prefix, FLAGS.num_shards)


if __name__ == "__main__":
    cli.run(main)
