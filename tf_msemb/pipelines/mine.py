"""Margin mining of two encoded corpora (`tf_msemb.pipelines.encode` outputs) as a Beam pipeline.

    python -m tf_msemb.pipelines.mine --src=runs/encoded/de --tgt=runs/encoded/en --output=mined.de-en.tsv \
        --threshold=1.06 [--index=ivf --nlist=4096 --nprobe=16] [--runner=DataflowRunner ...]

The same mining as `tools/mine_bitext.py` (`evaluation.mining`: ratio
margin by default, each margin's paper's pick, `max` or `intersect`
selection), spread over workers:

1. k-NN per block of (source shard, target shard): exact blocks score both
   directions in one pass of `search.exact_knn_both`; with `--index=ivf`
   one faiss IVF quantizer per side is trained on a sample of that side and
   reaches the workers as a side input; each sentence's `nprobe` cells are
   found once (written beside `--output` until it is written), and each
   shard is indexed once and searched by every shard of the other side.
2. A per-sentence top-k combine of the blocks' lists (`search.merge_top_k`),
   keyed by (side, shard), both directions.
3. Each sentence's mean cosine to its k neighbours (`mining.filled_mean`),
   joined back onto the neighbours that name it.
4. The margin and each query's candidate (`mining.best_candidates`), the
   threshold, then the selection (`mining.select`, on one worker: it takes
   each sentence once, best first, over all candidates at or above the
   threshold, which is what selecting first and thresholding after keeps;
   `intersect` thresholds the forward candidates only).
5. The texts joined onto the kept pairs, and one `score<TAB>src<TAB>tgt`
   line each, best first, in `--output`.

Sentences are named by their encode ids (sentence `id` in shard
`id % shards`), which follow the corpus' order: ties between identical
vectors resolve by id, as one machine resolves them by index. Every step is
a function of its input, so a retried or rerun stage gives the same lines.
"""

if __name__ == "__main__":
    from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import collections
import math

import apache_beam as beam
import numpy as np
import tensorflow as tf
from absl import flags
from apache_beam.metrics import Metrics

from tf_msemb.evaluation import mining
from tf_msemb.evaluation import search
from tf_msemb.pipelines.beam_io import StageDone
from tf_msemb.pipelines.beam_io import read_npz
from tf_msemb.pipelines.beam_io import run_transform
from tf_msemb.pipelines.beam_io import write_atomically
from tf_msemb.pipelines.beam_io import write_npz_atomically
from tf_msemb.pipelines.encode import read_manifest
from tf_msemb.pipelines.encode import read_shard
from tf_msemb.pipelines.encode import shard_paths

NAMESPACE = "tf_msemb.mine"
INDEXES = ("exact", "ivf")
SIDES = ("x", "y")


def _other(side):
    return "y" if side == "x" else "x"


def _named(shard_ids, rows):
    """The sentence ids of rows of a shard (-1, a neighbour an index left unfilled, stays -1)."""
    rows = np.asarray(rows, np.int64)
    return np.where(rows < 0, -1, shard_ids[np.maximum(rows, 0)] if len(shard_ids) else -1)


class _Shards:
    """The last few shards a worker loaded: `(ids, float32 vectors)` (blocks reuse them)."""

    def __init__(self, paths, keep=4):
        self.paths, self.keep, self.loaded = paths, keep, collections.OrderedDict()

    def __call__(self, shard):
        if shard not in self.loaded:
            ids, vectors, _ = read_shard(self.paths[shard])
            self.loaded[shard] = ids, np.ascontiguousarray(vectors, np.float32)
            if len(self.loaded) > self.keep:
                self.loaded.popitem(last=False)
        self.loaded.move_to_end(shard)
        return self.loaded[shard]


class ExactBlock(beam.DoFn):
    """`(x shard, y shard)` -> both directions' k-NN within the block, keyed `(side, shard)`, neighbours by id."""

    def __init__(self, x_paths, y_paths, k):
        self.x_paths, self.y_paths, self.k = x_paths, y_paths, k

    def setup(self):
        self.x, self.y = _Shards(self.x_paths), _Shards(self.y_paths)

    def process(self, block):
        qs, ts = block
        (x_names, x), (y_names, y) = self.x(qs), self.y(ts)
        if not len(x) or not len(y):
            return
        (x_sims, x_rows), (y_sims, y_rows) = search.exact_knn_both(x, y, self.k)
        Metrics.counter(NAMESPACE, "block_scores").inc(len(x) * len(y))
        yield ("x", qs), (x_names, x_sims, _named(y_names, x_rows))
        yield ("y", ts), (y_names, y_sims, _named(x_names, y_rows))


def _cells_path(cells_dir, side, shard):
    return f"{cells_dir}/{side}-{shard:05d}.npz"


class ProbeCells(beam.DoFn):
    """`(side, shard)` -> the IVF cells its sentences probe in the other side's cells, written to `cells_dir`.

    Every shard of the other side's pool is searched with them
    (`IvfColumn`), so a query's quantizer search runs once instead of once
    per pool shard (1M x 1M in 8 shards a side on 1 worker: 1,041 s with a
    quantizer search per pool shard, 675 s with this). Files, like the
    vectors: a side's cells are read by each pool shard, never held whole
    by one worker.
    """

    def __init__(self, paths, nprobe, cells_dir):
        self.paths, self.nprobe, self.cells_dir = paths, nprobe, cells_dir

    def process(self, element, trained):
        import faiss

        side, shard = element
        _, vectors, _ = read_shard(self.paths[side][shard])
        if not len(vectors):  # an empty shard is no column's query shard
            yield element
            return
        sims, cells = search.probed_cells(faiss.deserialize_index(trained[_other(side)]), vectors, self.nprobe)
        tf.io.gfile.makedirs(self.cells_dir)
        write_npz_atomically(_cells_path(self.cells_dir, side, shard), sims=sims, cells=cells)
        yield element


class IvfColumn(beam.DoFn):
    """`(side, shard)` of the searched pool -> the k-NN in it of every shard of the other side (IVF, nprobe cells).

    The pool shard is added once to the side's trained quantizer (a side
    input, the same cells on every worker) and searched with the cells
    `ProbeCells` wrote for each query shard, so the union over pool shards
    of each query's probed lists is what one index over the whole pool
    probes.
    """

    def __init__(self, paths, k, cells_dir):
        self.paths, self.k, self.cells_dir = paths, k, cells_dir

    def setup(self):
        self.shards = {side: _Shards(self.paths[side], keep=2) for side in SIDES}

    def process(self, column, trained, probed):
        import faiss

        del probed  # waited on: every query shard's cells are written
        side, shard = column
        pool_names, pool = self.shards[side](shard)
        if not len(pool):
            return
        index = faiss.deserialize_index(trained[side])
        index.add(pool)
        other = _other(side)
        for query_shard in range(len(self.paths[other])):
            names, queries = self.shards[other](query_shard)
            if len(queries):
                cells = read_npz(_cells_path(self.cells_dir, other, query_shard))
                sims, rows = search.search_probed(index, queries, self.k, (cells["sims"], cells["cells"]))
                Metrics.counter(NAMESPACE, "queries").inc(len(queries))
                yield (other, query_shard), (names, sims, _named(pool_names, rows))


class TrainQuantizer(beam.DoFn):
    """A side's vectors (every shard's share of a sample) -> a trained, empty IVF index, serialized."""

    def __init__(self, nlist, sizes):
        self.nlist, self.sizes = nlist, sizes

    def process(self, sample):
        import faiss

        side, vectors = sample
        # An empty shard's vectors are `[0, 0]`: left out.
        vectors = np.concatenate([part for _, part in sorted(vectors, key=lambda part: part[0]) if len(part)])
        yield side, faiss.serialize_index(search.trained_ivf(vectors, self.sizes[side], self.nlist))


def _merged(element, k):
    """All blocks' lists of one `(side, shard)` -> `(ids, sims, neighbour ids)`, its sentences' k-NN.

    Equal cosines rank by neighbour id (one machine ranks them by index,
    the same order: ids follow the corpus' order), so ties among identical
    vectors resolve as they do there.
    """
    key, parts = element
    names = parts[0][0]
    sims = np.concatenate([part[1] for part in parts], axis=1)
    neighbours = np.concatenate([part[2] for part in parts], axis=1)
    order = np.lexsort((neighbours, -sims), axis=1)[:, :k]  # NaN (unfilled) last
    return key, (names, np.take_along_axis(sims, order, axis=1), np.take_along_axis(neighbours, order, axis=1))


def _requests(element, num_shards):
    """A shard's k-NN -> for each shard of the other side, the ids there whose means this shard needs.

    Sentence `id` lives in shard `id % num_shards` (the encode pipeline's rule).
    """
    (side, shard), (_, _, neighbours) = element
    other = _other(side)
    named = neighbours[neighbours >= 0]
    for other_shard in np.unique(named % num_shards[other]):
        yield (other, int(other_shard)), (side, shard, np.unique(named[named % num_shards[other] == other_shard]))


def _answers(element):
    """A shard's means and the requests for them -> `((side, shard), (ids, means))` replies."""
    _, grouped = element
    names, means = next(iter(grouped["means"]))
    for side, requester, wanted in grouped["requests"]:
        yield (side, requester), (wanted, means[np.searchsorted(names, wanted)])


class Candidates(beam.DoFn):
    """A shard's k-NN, its means and its neighbours' means -> each query's best candidate at or above the threshold.

    Backward candidates are not thresholded for `intersect`: it keeps a
    forward candidate by its own score when the backward search found the
    same pair, whatever that one's score (they differ for one-sided margins).
    """

    def __init__(self, margin, pick, threshold, selection):
        self.margin, self.pick = margin, pick
        self.threshold = -np.inf if threshold is None else threshold
        self.backward_threshold = -np.inf if selection == "intersect" else self.threshold

    def process(self, element):
        (side, _), grouped = element
        names, sims, neighbours = next(iter(grouped["knn"]))
        _, means = next(iter(grouped["means"]))
        answers = list(grouped["answers"])
        known = np.concatenate([wanted for wanted, _ in answers]) if answers else np.zeros(0, np.int64)
        values = np.concatenate([value for _, value in answers]) if answers else np.zeros(0)
        order = np.argsort(known)
        known, values = known[order], values[order]
        neighbour_means = np.full(neighbours.shape, np.nan)
        filled = neighbours >= 0
        neighbour_means[filled] = values[np.searchsorted(known, neighbours[filled])]
        scores, chosen = mining.best_candidates(sims, neighbours, means, neighbour_means, self.margin, self.pick)
        kept = np.isfinite(scores) & (scores >= (self.threshold if side == "x" else self.backward_threshold))
        for score, query, candidate in zip(scores[kept], names[kept], chosen[kept]):
            pair = (int(query), int(candidate)) if side == "x" else (int(candidate), int(query))
            yield beam.pvalue.TaggedOutput(side, (float(score), *pair))


def _select(forward, backward, selection, threshold):
    """`mining.select`, then the threshold (as `mining.mine`; candidates below it were mostly dropped before)."""
    chosen = mining.select(forward, backward, selection)
    return chosen if threshold is None else [c for c in chosen if c[0] >= threshold]


class AttachTexts(beam.DoFn):
    """`(shard, pairs)` -> each pair with the text of its `side`'s sentence (in that shard) appended."""

    def __init__(self, paths, side):
        self.paths, self.side = paths, side

    def process(self, element):
        shard, pairs = element
        names, _, texts = read_shard(self.paths[shard])
        for pair in pairs:
            yield *pair, texts[int(np.searchsorted(names, pair[1 if self.side == "x" else 2]))]


def _write_lines(pairs, output, scratch=None):
    """Writes `score<TAB>src<TAB>tgt` lines, best first (the order `mining.select` gives), then removes `scratch`."""
    pairs = sorted(pairs, key=lambda p: (p[0], p[1], p[2]), reverse=True)

    def write(partial):
        with tf.io.gfile.GFile(partial, "w") as f:
            for score, _, _, src, tgt in pairs:
                f.write(f"{score:.6f}\t{src.replace(chr(9), ' ')}\t{tgt.replace(chr(9), ' ')}\n")

    write_atomically(output, write)
    if scratch and tf.io.gfile.exists(scratch):
        tf.io.gfile.rmtree(scratch)
    return len(pairs)


def _sample(element, paths, sizes, per_side, seed):
    """`(side, shard)` -> `(side, (shard, its share of the side's training sample))`: a fixed draw per shard."""
    side, shard = element
    _, vectors, _ = read_shard(paths[side][shard])
    take = min(len(vectors), math.ceil(per_side * len(vectors) / max(sizes[side], 1)))
    rows = np.sort(np.random.default_rng([seed, SIDES.index(side), shard]).choice(len(vectors), size=take,
                                                                                  replace=False))
    yield side, (shard, np.asarray(vectors[rows], np.float32))


class MineBitext(beam.PTransform):
    """Two encoded corpora -> the mined pairs' lines in `output` (outputs the number of pairs written).

    Args:
        src_dir, tgt_dir: `tf_msemb.pipelines.encode` output directories.
        output: the TSV file to write.
        k, margin, selection, pick, threshold: as `tools/mine_bitext.py`'s flags.
        index: `"exact"` blocks, or `"ivf"` (a quantizer per side trained on `sample` vectors, `nlist` cells,
            `nprobe` cells probed per query).
    """

    def __init__(self, src_dir, tgt_dir, output, k=4, margin="ratio", selection="max", pick=None, threshold=None,
                 index="exact", nlist=None, nprobe=16, sample=100_000, seed=0):
        super().__init__()
        if index not in INDEXES:
            raise ValueError(f"Unknown index {index!r}; choose from {INDEXES}.")
        for value, choices, what in ((margin, mining.MARGINS, "margin"), (selection, mining.SELECTIONS, "selection"),
                                     (pick or mining.PICKS[0], mining.PICKS, "pick")):
            if value not in choices:  # here, not on a worker
                raise ValueError(f"Unknown {what} {value!r}; choose from {choices}.")
        self.paths = {"x": shard_paths(src_dir), "y": shard_paths(tgt_dir)}
        self.sizes = {"x": read_manifest(src_dir)["sentences"], "y": read_manifest(tgt_dir)["sentences"]}
        self.output, self.k, self.margin, self.selection, self.pick = output, k, margin, selection, pick
        self.threshold, self.index, self.nlist, self.nprobe = threshold, index, nlist, nprobe
        self.sample, self.seed = sample, seed

    def expand(self, pipeline):
        knn_parts = self._knn_parts(pipeline)
        knn = (knn_parts
               | "BySentenceShard" >> beam.GroupByKey()
               | "TopK" >> beam.Map(_merged, self.k))
        _ = knn | StageDone("knn", "shards")
        means = knn | "Means" >> beam.MapTuple(lambda key, knn: (key, (knn[0], mining.filled_mean(knn[1]))))
        num_shards = {side: len(paths) for side, paths in self.paths.items()}
        answers = ({"means": means, "requests": knn | "Requests" >> beam.FlatMap(_requests, num_shards)}
                   | "ByNeighbourShard" >> beam.CoGroupByKey()
                   | "Answers" >> beam.FlatMap(_answers))
        candidates = ({"knn": knn, "means": means, "answers": answers}
                      | "WithNeighbourMeans" >> beam.CoGroupByKey()
                      | "Candidates" >> beam.ParDo(Candidates(self.margin, self.pick, self.threshold,
                                                              self.selection)).with_outputs(*SIDES))
        backward = candidates.y | "Backward" >> beam.combiners.ToList()
        chosen = (candidates.x
                  | "Forward" >> beam.combiners.ToList()
                  | "Select" >> beam.FlatMap(_select, beam.pvalue.AsSingleton(backward), self.selection,
                                           self.threshold))
        _ = chosen | StageDone("select", "pairs")
        lines = (chosen
                 | "SourceShard" >> beam.Map(lambda pair, n: (pair[1] % n, pair), len(self.paths["x"]))
                 | "BySource" >> beam.GroupByKey()
                 | "SourceText" >> beam.ParDo(AttachTexts(self.paths["x"], "x"))
                 | "TargetShard" >> beam.Map(lambda pair, n: (pair[2] % n, pair), len(self.paths["y"]))
                 | "ByTarget" >> beam.GroupByKey()
                 | "TargetText" >> beam.ParDo(AttachTexts(self.paths["y"], "y")))
        return (lines
                | "All" >> beam.combiners.ToList()
                | "Write" >> beam.Map(_write_lines, self.output, self._cells_dir() if self.index == "ivf" else None))

    def _knn_parts(self, pipeline):
        if self.index == "exact":
            blocks = [(qs, ts) for qs in range(len(self.paths["x"])) for ts in range(len(self.paths["y"]))]
            return (pipeline
                    | "Blocks" >> beam.Create(blocks)
                    | "SpreadBlocks" >> beam.Reshuffle()
                    | "ExactBlocks" >> beam.ParDo(ExactBlock(self.paths["x"], self.paths["y"], self.k)))
        shards = [(side, shard) for side in SIDES for shard in range(len(self.paths[side]))]
        trained = (pipeline
                   | "SampleShards" >> beam.Create(shards)
                   | "Sample" >> beam.FlatMap(_sample, self.paths, self.sizes, self.sample, self.seed)
                   | "BySide" >> beam.GroupByKey()
                   | "Train" >> beam.ParDo(TrainQuantizer(self.nlist, self.sizes)))
        probed = (pipeline
                  | "QueryShards" >> beam.Create(shards)
                  | "SpreadQueryShards" >> beam.Reshuffle()
                  | "ProbeCells" >> beam.ParDo(ProbeCells(self.paths, self.nprobe, self._cells_dir()),
                                               beam.pvalue.AsDict(trained)))
        return (pipeline
                | "Columns" >> beam.Create(shards)
                | "SpreadColumns" >> beam.Reshuffle()
                | "IvfColumns" >> beam.ParDo(IvfColumn(self.paths, self.k, self._cells_dir()),
                                             beam.pvalue.AsDict(trained), beam.pvalue.AsList(probed)))

    def _cells_dir(self):
        """Where the IVF mode's probed cells go: beside `output`, removed once the output is written."""
        return f"{self.output}.cells"


def main(argv):
    """Builds and runs the pipeline from the flags; `argv`'s leftovers are Beam's pipeline options."""
    FLAGS = flags.FLAGS
    run_transform(MineBitext(FLAGS.src, FLAGS.tgt, FLAGS.output, FLAGS.k, FLAGS.margin, FLAGS.selection, FLAGS.pick,
                             FLAGS.threshold, FLAGS.index, FLAGS.nlist, FLAGS.nprobe, FLAGS.sample), argv[1:])
    print(f"Mined pairs: {FLAGS.output}")


def define_flags():
    """The command line's flags (defined only when it runs: absl flags are process-wide)."""
    flags.DEFINE_string("src", None, "The source side: an encode pipeline's output_dir.")
    flags.DEFINE_string("tgt", None, "The target side: an encode pipeline's output_dir.")
    flags.DEFINE_string("output", None, "TSV of score<TAB>src<TAB>tgt, best first.")
    flags.DEFINE_float("threshold", None, "Keep pairs scoring at least this (all selected pairs when unset).")
    flags.DEFINE_integer("k", 4, "Neighbours per direction for the margin.")
    flags.DEFINE_enum("margin", "ratio", list(mining.MARGINS), "Margin score.")
    flags.DEFINE_enum("selection", "max", list(mining.SELECTIONS), "Candidate selection.")
    flags.DEFINE_enum("pick", None, list(mining.PICKS), "Each query's candidate (default: the margin's paper's rule).")
    flags.DEFINE_enum("index", "exact", list(INDEXES), "Exact blocks, or IVF cells shared by every worker.")
    flags.DEFINE_integer("nlist", None, "IVF cells per side (default about 4 sqrt(n) of the sample's pool).")
    flags.DEFINE_integer("nprobe", 16, "IVF cells probed per query.")
    flags.DEFINE_integer("sample", 100_000, "Vectors per side the IVF cells are trained on.")
    flags.mark_flags_as_required(["src", "tgt", "output"])


if __name__ == "__main__":
    from tf_msemb.pipelines import mine  # the importable module: workers unpickle its classes by name

    mine.define_flags()
    flags.adopt_module_key_flags(mine)  # listed by --help
    cli.run(mine.main, beam_arguments=True)
