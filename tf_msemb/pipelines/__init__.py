"""Apache Beam pipelines for corpus-scale work around training (the `beam` extra: `pip install -e '.[beam]'`).

Each module is one composite `PTransform` plus its command line
(`python -m tf_msemb.pipelines.<name> --runner=... [pipeline options]`):
`records` (text corpora to TFRecord shards and manifest), `encode` (an export
over a text corpus, a shard at a time, resumable), `teacher` (a corpus' records get
a teacher's vectors) and `mine` (margin mining of two encoded corpora).
Nothing else in the package imports this one, so the package without Beam
still imports and trains.
"""
