"""Margin mining of two encoded corpora (`tf_msemb.pipelines.encode` outputs) as a Beam pipeline.

    python -m tf_msemb.pipelines.mine --src=runs/encoded/de --tgt=runs/encoded/en --output=mined.de-en.tsv \
        --threshold=1.06 [--codes=binary] [--runner=DataflowRunner ...]

The same mining as `tools/mine_bitext.py` (`evaluation.mining`: ratio
margin by default, each margin's paper's pick, `max` or `intersect`
selection), spread over workers and keyed by shard throughout: no step
holds more than a few shards, whatever the pool sizes.

1. k-NN of every sentence in the other side, per block of (query shard,
   pool shard), combined per query shard a block at a time
   (`approximate.merge_shards`: cosine, then id).
   - Exact (default): both directions of a block in one pass
     (`search.exact_knn_both`).
   - `--codes` (`mining.approximate`): each side's cells and codes are
     trained on the sentences `approximate.drawn` picks, each query shard's
     cells are probed once, each pool shard is indexed once and searched by
     every query shard, its best candidates by code re-scored exactly from
     its vectors (`approximate.search_shard`): the steps and shards of
     `mining.sharded.MiningRun`, so one machine given the encode shards and
     ids mines the same pairs.
2. Each sentence's mean cosine to its k neighbours (`mining.filled_mean`),
   sent to the shards whose sentences name it.
3. The margin and each query's candidate (`mining.best_candidates`), at or
   above the threshold (`intersect` thresholds the forward ones only).
4. The selection, by key. `max` (each sentence once, best first) runs in
   rounds (`mining.selection`): on each source's shard, then on each
   target's, a candidate first at both its sentences is kept and the
   candidates touching a kept sentence leave. `--rounds` rounds are
   unrolled; candidates still undecided after them stop the run with an
   error (rerun with more: the k-NN are kept). `intersect` joins the
   forward and backward candidates on the source's shard.
5. The texts, joined per shard; each target shard's lines written sorted,
   then merged (streaming) into `--output`, best first.

Sentences are named by their encode ids (sentence `id` in shard
`id % shards`), which follow the corpus' order: ties between identical
vectors resolve by id, as one machine resolves them by index.

Resumable: each block's k-NN (and with `--codes`, each side's trained index,
each pool shard's index and each query shard's cells) is a file in
`--work_dir` (default `<output>.work`), written whole; a rerun with the same
corpora and search settings skips what is there (margin and selection, a
few seconds a shard, are redone). The work directory goes once the output
is written.
"""

if __name__ == "__main__":
    from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import collections
import dataclasses
import heapq
import json

import apache_beam as beam
import numpy as np
import tensorflow as tf
from absl import flags
from apache_beam.metrics import Metrics

from tf_msemb.evaluation import mining
from tf_msemb.evaluation import search
from tf_msemb.files import read_npz
from tf_msemb.files import write_atomically
from tf_msemb.files import write_json_atomically
from tf_msemb.files import write_npz_atomically
from tf_msemb.mining import approximate
from tf_msemb.mining import selection as selections
from tf_msemb.pipelines.beam_io import StageDone
from tf_msemb.pipelines.beam_io import run_transform
from tf_msemb.pipelines.encode import read_manifest
from tf_msemb.pipelines.encode import read_shard
from tf_msemb.pipelines.encode import shard_paths
from tf_msemb.text_files import CorpusError

NAMESPACE = "tf_msemb.mine"
SIDES = ("x", "y")
EXACT = "exact"


def _other(side):
    return "y" if side == "x" else "x"


def _named(shard_ids, rows):
    """The sentence ids of rows of a shard (-1, a neighbour an index left unfilled, stays -1)."""
    rows = np.asarray(rows, np.int64)
    return np.where(rows < 0, -1, shard_ids[np.maximum(rows, 0)] if len(shard_ids) else -1)


class _Shards:
    """The last few shards a worker loaded: `(ids, vectors)`, vectors as stored (blocks reuse them)."""

    def __init__(self, paths, keep=4):
        self.paths, self.keep, self.loaded = paths, keep, collections.OrderedDict()

    def __call__(self, shard):
        if shard not in self.loaded:
            ids, vectors, _ = read_shard(self.paths[shard])
            self.loaded[shard] = ids, vectors
            if len(self.loaded) > self.keep:
                self.loaded.popitem(last=False)
        self.loaded.move_to_end(shard)
        return self.loaded[shard]


class WorkDir:
    """The files of one mining run's steps: `path(name)` under `root`, and whether a step's file is there."""

    def __init__(self, root):
        self.root = root

    def path(self, name):
        return f"{self.root}/{name}"

    def has(self, name):
        return tf.io.gfile.exists(self.path(name))

    def knn_part(self, side, shard, pool_shard):
        return f"knn.{side}.{shard:05d}.{pool_shard:05d}.npz"

    def check(self, settings):
        """Records the search settings; a work directory holding another run's files is refused."""
        if tf.io.gfile.exists(self.root) and tf.io.gfile.listdir(self.root) and not self.has("settings.json"):
            raise CorpusError(f"{self.root} is not empty and holds no mining run (it is removed once the output is "
                              "written); pass another --work_dir")
        tf.io.gfile.makedirs(self.root)
        if self.has("settings.json"):
            with tf.io.gfile.GFile(self.path("settings.json")) as f:
                if json.load(f) != settings:
                    raise CorpusError(f"{self.root} holds a mining run with other corpora or search settings; remove "
                                      "it or pass another --work_dir")
            return
        write_json_atomically(self.path("settings.json"), settings)


def _knn_part(work, name):
    part = read_npz(work.path(name))
    return part["names"], part["sims"], part["neighbours"]


class ExactBlock(beam.DoFn):
    """`(x shard, y shard)` -> both directions' k-NN within the block, keyed `(side, shard)`, neighbours by id."""

    def __init__(self, x_paths, y_paths, k, work):
        self.x_paths, self.y_paths, self.k, self.work = x_paths, y_paths, k, work

    def setup(self):
        self.x, self.y = _Shards(self.x_paths), _Shards(self.y_paths)

    def process(self, block):
        qs, ts = block
        names = self.work.knn_part("x", qs, ts), self.work.knn_part("y", ts, qs)
        if not all(self.work.has(name) for name in names):
            (x_names, x), (y_names, y) = self.x(qs), self.y(ts)
            if not len(x) or not len(y):
                return
            (x_sims, x_rows), (y_sims, y_rows) = search.exact_knn_both(np.asarray(x, np.float32),
                                                                       np.asarray(y, np.float32), self.k)
            Metrics.counter(NAMESPACE, "block_scores").inc(len(x) * len(y))
            write_npz_atomically(self.work.path(names[0]), names=x_names, sims=x_sims,
                                 neighbours=_named(y_names, x_rows))
            write_npz_atomically(self.work.path(names[1]), names=y_names, sims=y_sims,
                                 neighbours=_named(x_names, y_rows))
        yield ("x", qs), _knn_part(self.work, names[0])
        yield ("y", ts), _knn_part(self.work, names[1])


class TrainIndex(beam.DoFn):
    """`(side, [(shard, ids, vectors) drawn])` -> `side`, once `index.<side>.trained.faiss` is written."""

    def __init__(self, plans, work):
        self.plans, self.work = plans, work

    def process(self, element):
        side, parts = element
        name = f"index.{side}.trained.faiss"
        if not self.work.has(name):
            parts = [part for part in parts if len(part[1])]
            ids = np.concatenate([ids for _, ids, _ in parts])
            vectors = np.concatenate([vectors for _, _, vectors in parts])[np.argsort(ids)]  # one machine's order
            _write_index(self.work, name, approximate.train_index(self.plans[side], vectors))
        yield side


def _read_index(work, name):
    import faiss

    with tf.io.gfile.GFile(work.path(name), "rb") as f:
        return faiss.deserialize_index(np.frombuffer(bytearray(f.read()), np.uint8))


def _write_index(work, name, index):
    import faiss

    data = faiss.serialize_index(index).tobytes()

    def write(partial):
        with tf.io.gfile.GFile(partial, "wb") as f:
            f.write(data)

    write_atomically(work.path(name), write)


class ProbeCells(beam.DoFn):
    """`(side, shard)` -> itself, once its sentences' cells in the other side's index are in `cells.<side>.<shard>`.

    Every pool shard is searched with them (`SearchColumn`): a query's
    cells are found once, not once per pool shard, and read from a file by
    each pool shard's worker, never held whole by one.
    """

    def __init__(self, paths, plans, work):
        self.paths, self.plans, self.work = paths, plans, work

    def process(self, element, trained):
        del trained  # waited on: every side's index is trained
        side, shard = element
        name = f"cells.{side}.{shard:05d}.npz"
        if not self.work.has(name):
            _, vectors, _ = read_shard(self.paths[side][shard])
            other = _other(side)
            sims, cells = approximate.probed_cells(_read_index(self.work, f"index.{other}.trained.faiss"),
                                                   self.plans[other], np.asarray(vectors, np.float32))
            write_npz_atomically(self.work.path(name), sims=sims, cells=cells.astype(np.int32))
        yield element


class SearchColumn(beam.DoFn):
    """`(side, shard)` of a pool -> each query shard of the other side's k-NN in it, keyed `(side, shard)`.

    The pool shard is indexed once (`index.<side>.<shard>.faiss`) and
    searched with each query shard's cells (`approximate.search_shard`:
    the best candidates by code, re-scored from the shard's own vectors);
    each block's k-NN is a file, skipped when a rerun finds it.
    """

    def __init__(self, paths, plans, k, work):
        self.paths, self.plans, self.k, self.work = paths, plans, k, work

    def setup(self):
        self.shards = {side: _Shards(self.paths[side], keep=2) for side in SIDES}

    def process(self, column, probed):
        del probed  # waited on: every query shard's cells are written
        side, shard = column
        other = _other(side)
        names = [self.work.knn_part(other, query_shard, shard) for query_shard in range(len(self.paths[other]))]
        if not all(self.work.has(name) for name in names):
            pool_ids, pool = self.shards[side](shard)
            if not len(pool):
                return
            index_name = f"index.{side}.{shard:05d}.faiss"
            if self.work.has(index_name):
                index = _read_index(self.work, index_name)
            else:
                index = _read_index(self.work, f"index.{side}.trained.faiss")
                approximate.add_vectors(index, pool, pool_ids)
                _write_index(self.work, index_name, index)
            for query_shard, name in enumerate(names):
                if self.work.has(name):
                    continue
                query_ids, queries = self.shards[other](query_shard)
                if len(queries):
                    cells = read_npz(self.work.path(f"cells.{other}.{query_shard:05d}.npz"))
                    sims, neighbours = approximate.search_shard(
                        index, self.plans[side], queries, (cells["sims"], cells["cells"].astype(np.int64)), pool,
                        pool_ids, self.k)
                    Metrics.counter(NAMESPACE, "queries").inc(len(queries))
                    write_npz_atomically(self.work.path(name), names=query_ids, sims=sims, neighbours=neighbours)
        for query_shard, name in enumerate(names):
            if self.work.has(name):
                yield (other, query_shard), _knn_part(self.work, name)


def _drawn(element, paths, sizes, plans, seed, work):
    """`(side, shard)` -> `(side, (shard, ids, vectors))` of the shard's sentences in the side's training sample."""
    side, shard = element
    if work.has(f"index.{side}.trained.faiss"):
        yield side, (shard, np.zeros(0, np.int64), np.zeros((0, 0), np.float32))
        return
    ids, vectors, _ = read_shard(paths[side][shard])
    keep = approximate.drawn(ids, sizes[side], plans[side], seed)
    yield side, (shard, ids[keep], np.asarray(vectors[keep], np.float32))


class MergeKnn(beam.CombineFn):
    """Blocks' k-NN lists of one `(side, shard)` -> `(ids, sims, neighbour ids)`, its sentences' k-NN.

    Merged a block at a time (`approximate.merge_shards`), so a query shard
    holds two lists however many pool shards there are. Equal cosines rank
    by neighbour id (one machine ranks them by index, the same order: ids
    follow the corpus' order), so ties among identical vectors resolve as
    they do there.
    """

    def __init__(self, k):
        self.k = k

    def create_accumulator(self):
        return None

    def add_input(self, accumulator, part):
        if accumulator is None:
            return part
        names, sims, neighbours = accumulator
        return (names, *approximate.merge_shards([(sims, neighbours), (part[1], part[2])], self.k))

    def merge_accumulators(self, accumulators):
        merged = None
        for accumulator in accumulators:
            if accumulator is not None:
                merged = self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


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
    """A shard's k-NN, its means and its neighbours' means -> its queries' best candidates at or above the threshold.

    Outputs `(scores, x ids, y ids)` arrays tagged by side. Backward
    candidates are not thresholded for `intersect`: it keeps a forward
    candidate by its own score when the backward search found the same
    pair, whatever that one's score (they differ for one-sided margins).
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
        if kept.any():
            queries, partners = names[kept].astype(np.int64), chosen[kept].astype(np.int64)
            pairs = (queries, partners) if side == "x" else (partners, queries)
            yield beam.pvalue.TaggedOutput(side, (scores[kept].astype(np.float64), *pairs))


def _take(edges, keep):
    return tuple(array[keep] for array in edges)


def _by_shard(edges, axis, num_shards, tag=None):
    """Candidates `(scores, xs, ys, ...)` -> `(shard of their x or y, [tag,] the shard's candidates)`."""
    shards = edges[1 + axis] % num_shards
    for shard in np.unique(shards):
        part = _take(edges, shards == shard)
        yield int(shard), ((tag, part) if tag else part)


def _free_at_x(element):
    """One source shard's live candidates less those whose source a candidate kept last round took (None if none)."""
    _, values = element
    edges = [part for tag, part in values if tag == "edges"]
    taken = [part for tag, part in values if tag == "taken"]
    if not edges:
        return None
    edges = tuple(np.concatenate(arrays) for arrays in zip(*edges))
    return _take(edges, ~np.isin(edges[1], np.concatenate(taken))) if taken else edges


def _round_at_x(element, num_y_shards):
    """One source shard's free candidates -> each marked whether it is first at its source, routed to its target."""
    edges = _free_at_x(element)
    if edges is not None:
        yield from _by_shard((*edges, selections.first_at(edges[1], *edges)), 1, num_y_shards)


def _undecided(element):
    """After the last round, how many of a source shard's candidates are still free."""
    edges = _free_at_x(element)
    if edges is not None:
        yield len(edges[0])


class RoundAtY(beam.DoFn):
    """One target shard's candidates, marked at their sources -> kept ones (tagged `kept`), the rest routed back.

    A candidate first at both its sentences is kept; candidates whose
    target it took leave here, those whose source it took leave on the
    source's shard next round (its sentence goes there as `taken`).
    """

    def __init__(self, num_x_shards):
        self.num_x_shards = num_x_shards

    def process(self, element):
        _, parts = element
        scores, xs, ys, first_x = (np.concatenate(arrays) for arrays in zip(*parts))
        edges = scores, xs, ys
        kept = first_x & selections.first_at(ys, *edges)
        if kept.any():
            yield beam.pvalue.TaggedOutput("kept", _take(edges, kept))
            for shard, taken in _by_shard(_take(edges, kept), 0, self.num_x_shards):
                yield shard, ("taken", taken[1])
        live = ~kept & ~np.isin(ys, ys[kept])
        if live.any():
            yield from _by_shard(_take(edges, live), 0, self.num_x_shards, "edges")


def _intersected(element):
    """A source shard's forward and backward candidates -> the forward ones the backward search found too."""
    _, grouped = element
    forward, backward = (tuple(np.concatenate(arrays) for arrays in zip(*grouped[tag])) if grouped[tag] else None
                         for tag in ("forward", "backward"))
    if forward is not None and backward is not None:
        chosen = selections.intersect(forward, backward)
        if len(chosen[0]):
            yield chosen


def _texts(path, ids):
    """The texts of sentences `ids` of one encoded shard, as an object array."""
    names, _, texts = read_shard(path)
    return np.asarray(texts, dtype=object)[np.searchsorted(names, ids)] if len(ids) else np.zeros(0, object)


class AttachSourceTexts(beam.DoFn):
    """`(source shard, [(scores, xs, ys)])` -> `(scores, xs, ys, source texts)`."""

    def __init__(self, paths):
        self.paths = paths

    def process(self, element):
        shard, parts = element
        scores, xs, ys = (np.concatenate(arrays) for arrays in zip(*parts))
        yield scores, xs, ys, _texts(self.paths[shard], xs)


class WritePart(beam.DoFn):
    """A target shard's pairs with their source texts -> `part.<shard>.tsv` in the work directory, best first."""

    def __init__(self, paths, work):
        self.paths, self.work = paths, work

    def process(self, element):
        shard, parts = element
        scores, xs, ys, sources = (np.concatenate(arrays) for arrays in zip(*parts))
        targets = _texts(self.paths[shard], ys)
        order = selections.best_first(scores, xs, ys)
        name = f"part.{shard:05d}.tsv"

        def write(partial):
            with tf.io.gfile.GFile(partial, "w") as f:
                for row in order.tolist():
                    src, tgt = (text.replace("\t", " ").replace("\n", " ") for text in (sources[row], targets[row]))
                    f.write(f"{float(scores[row])!r}\t{xs[row]}\t{ys[row]}\t{src}\t{tgt}\n")

        write_atomically(self.work.path(name), write)
        yield name


def _part_rows(path):
    with tf.io.gfile.GFile(path) as f:
        for line in f:
            score, x, y, src, tgt = line.rstrip("\n").split("\t")
            yield (-float(score), -int(x), -int(y)), score, src, tgt


def _write_output(output, parts, undecided, work, rounds):
    """Merges the sorted parts into `output` (best first, as `mining.select` orders), then removes `work`."""
    if tf.io.gfile.exists(output) and not tf.io.gfile.exists(work.root):  # a retry of this step after it finished
        with tf.io.gfile.GFile(output) as f:
            return sum(1 for _ in f)
    if undecided:
        raise CorpusError(f"{undecided} candidate pairs are still undecided after {rounds} selection rounds: rerun "
                          f"with --rounds={2 * rounds} (the k-NN in {work.root} are reused)")
    merged = heapq.merge(*(_part_rows(work.path(name)) for name in sorted(parts)), key=lambda row: row[0])
    count = 0

    def write(partial):
        nonlocal count
        with tf.io.gfile.GFile(partial, "w") as f:
            for _, score, src, tgt in merged:
                f.write(f"{float(score):.6f}\t{src}\t{tgt}\n")
                count += 1

    write_atomically(output, write)
    tf.io.gfile.rmtree(work.root)
    return count


class SelectMaxInRounds(beam.PTransform):
    """Candidates `(scores, xs, ys)` (arrays, any batches) -> `(kept, undecided)`: greedy `max` selection by key.

    `rounds` rounds of `_round_at_x` on the sources' shards and `RoundAtY`
    on the targets'; `kept` holds the kept candidates (arrays), `undecided`
    the number of candidates no round settled (0 when `rounds` sufficed).
    """

    def __init__(self, num_shards, rounds):
        super().__init__()
        self.num_shards, self.rounds = num_shards, rounds

    def expand(self, candidates):
        live = candidates | "ToSources" >> beam.FlatMap(_by_shard, 0, self.num_shards["x"], "edges")
        kept = []
        for number in range(1, self.rounds + 1):
            rounded = (live
                       | f"Round{number}BySource" >> beam.GroupByKey()
                       | f"Round{number}AtSource" >> beam.FlatMap(_round_at_x, self.num_shards["y"])
                       | f"Round{number}ByTarget" >> beam.GroupByKey()
                       | f"Round{number}AtTarget" >> beam.ParDo(RoundAtY(self.num_shards["x"])).with_outputs(
                           "kept", main="live"))
            kept.append(rounded.kept)
            live = rounded.live
        undecided = (live
                     | "LastBySource" >> beam.GroupByKey()
                     | "Undecided" >> beam.FlatMap(_undecided)
                     | "CountUndecided" >> beam.CombineGlobally(sum))
        return tuple(kept) | "Kept" >> beam.Flatten(), undecided


def _print_count(count, stage, unit):
    print(f"[pipeline] {stage}: {count} {unit}", flush=True)


def search_plan(size, codes, cells=None, probes=None, candidates=None):
    """`approximate.plan_for(size, codes)`, with `cells` (40 training vectors each), `probes`, `candidates` if given."""
    plan = approximate.plan_for(size, codes)
    if cells:
        plan = dataclasses.replace(plan, cells=cells, probes=min(plan.probes, cells), train_size=min(size, 40 * cells))
    return dataclasses.replace(plan, **{name: value for name, value in (("probes", probes), ("candidates", candidates))
                                        if value is not None})


class MineBitext(beam.PTransform):
    """Two encoded corpora -> the mined pairs' lines in `output` (outputs the number of pairs written).

    Args:
        src_dir, tgt_dir: `tf_msemb.pipelines.encode` output directories.
        output: the TSV file to write.
        k, margin, selection, pick, threshold: as `tools/mine_bitext.py`'s flags.
        codes: `None` for exact blocks, or one of `approximate.CODES`: each side's index planned by
            `approximate.plan_for` from its size, with `cells`, `probes`, `candidates` overriding the plan's.
        rounds: `max` selection rounds unrolled in the pipeline.
        work_dir: the steps' files (default `<output>.work`).
        seed: of the training samples.
    """

    def __init__(self, src_dir, tgt_dir, output, k=4, margin="ratio", selection="max", pick=None, threshold=None,
                 codes=None, cells=None, probes=None, candidates=None, rounds=16, work_dir=None, seed=0):
        super().__init__()
        for value, choices, what in ((margin, mining.MARGINS, "margin"), (selection, mining.SELECTIONS, "selection"),
                                     (pick or mining.PICKS[0], mining.PICKS, "pick"),
                                     (codes or EXACT, (EXACT, *approximate.CODES), "codes")):
            if value not in choices:  # here, not on a worker
                raise ValueError(f"Unknown {what} {value!r}; choose from {choices}.")
        if rounds < 1:
            raise ValueError(f"rounds={rounds}: max selection needs at least one round.")
        manifests = {"x": read_manifest(src_dir), "y": read_manifest(tgt_dir)}
        self.paths = {"x": shard_paths(src_dir), "y": shard_paths(tgt_dir)}
        self.sizes = {side: manifest["sentences"] for side, manifest in manifests.items()}
        self.output, self.k, self.margin, self.selection, self.pick = output, k, margin, selection, pick
        self.threshold, self.rounds, self.seed = threshold, rounds, seed
        self.codes = None if codes == EXACT else codes
        self.plans = {side: self.codes and search_plan(size, self.codes, cells, probes, candidates)
                      for side, size in self.sizes.items()}
        self.work = WorkDir(work_dir or f"{output}.work")
        self.work.check({"src": src_dir, "tgt": tgt_dir, "manifests": manifests, "k": k, "seed": seed,
                         "plans": {side: plan and vars(plan) for side, plan in self.plans.items()}})

    def expand(self, pipeline):
        knn = (self._knn_parts(pipeline)
               | "TopK" >> beam.CombinePerKey(MergeKnn(self.k)))
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
        chosen, undecided = self._select(candidates, num_shards)
        _ = (chosen
             | "PairsPerPart" >> beam.Map(lambda edges: len(edges[0]))
             | "Pairs" >> beam.CombineGlobally(sum)
             | "PrintSelected" >> beam.Map(_print_count, "select", "pairs"))
        parts = (chosen
                 | "SourceShard" >> beam.FlatMap(_by_shard, 0, num_shards["x"])
                 | "BySource" >> beam.GroupByKey()
                 | "SourceText" >> beam.ParDo(AttachSourceTexts(self.paths["x"]))
                 | "TargetShard" >> beam.FlatMap(_by_shard, 1, num_shards["y"])
                 | "ByTarget" >> beam.GroupByKey()
                 | "WriteParts" >> beam.ParDo(WritePart(self.paths["y"], self.work)))
        return (pipeline
                | "Output" >> beam.Create([self.output])
                | "Write" >> beam.Map(_write_output, beam.pvalue.AsList(parts), beam.pvalue.AsSingleton(undecided),
                                      self.work, self.rounds))

    def _select(self, candidates, num_shards):
        """The selected candidates (arrays, by shard) and how many `max` left undecided."""
        if self.selection == "max":
            return (candidates.x, candidates.y) | "BothWays" >> beam.Flatten() | "SelectMax" >> SelectMaxInRounds(
                num_shards, self.rounds)
        if self.selection == "intersect":
            chosen = ({"forward": candidates.x | "ForwardBySource" >> beam.FlatMap(_by_shard, 0, num_shards["x"]),
                       "backward": candidates.y | "BackwardBySource" >> beam.FlatMap(_by_shard, 0, num_shards["x"])}
                      | "BySourceShard" >> beam.CoGroupByKey()
                      | "Intersect" >> beam.FlatMap(_intersected))
        else:
            chosen = candidates.x if self.selection == "forward" else candidates.y
        return chosen, candidates.x.pipeline | "NoneUndecided" >> beam.Create([0])

    def _knn_parts(self, pipeline):
        if self.codes is None:
            blocks = [(qs, ts) for qs in range(len(self.paths["x"])) for ts in range(len(self.paths["y"]))]
            return (pipeline
                    | "Blocks" >> beam.Create(blocks)
                    | "SpreadBlocks" >> beam.Reshuffle()
                    | "ExactBlocks" >> beam.ParDo(ExactBlock(self.paths["x"], self.paths["y"], self.k, self.work)))
        shards = [(side, shard) for side in SIDES for shard in range(len(self.paths[side]))]
        trained = (pipeline
                   | "SampleShards" >> beam.Create(shards)
                   | "Draw" >> beam.FlatMap(_drawn, self.paths, self.sizes, self.plans, self.seed, self.work)
                   | "BySide" >> beam.GroupByKey()
                   | "Train" >> beam.ParDo(TrainIndex(self.plans, self.work)))
        probed = (pipeline
                  | "QueryShards" >> beam.Create(shards)
                  | "SpreadQueryShards" >> beam.Reshuffle()
                  | "ProbeCells" >> beam.ParDo(ProbeCells(self.paths, self.plans, self.work),
                                               beam.pvalue.AsList(trained)))
        return (pipeline
                | "PoolShards" >> beam.Create(shards)
                | "SpreadPoolShards" >> beam.Reshuffle()
                | "SearchColumns" >> beam.ParDo(SearchColumn(self.paths, self.plans, self.k, self.work),
                                                beam.pvalue.AsList(probed)))


def main(argv):
    """Builds and runs the pipeline from the flags; `argv`'s leftovers are Beam's pipeline options."""
    FLAGS = flags.FLAGS
    run_transform(MineBitext(FLAGS.src, FLAGS.tgt, FLAGS.output, FLAGS.k, FLAGS.margin, FLAGS.selection, FLAGS.pick,
                             FLAGS.threshold, FLAGS.codes, FLAGS.cells, FLAGS.probes, FLAGS.candidates, FLAGS.rounds,
                             FLAGS.work_dir), argv[1:])
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
    flags.DEFINE_enum("codes", EXACT, [EXACT, *approximate.CODES],
                      "Exact blocks, or IVF cells over these codes with the best candidates re-scored "
                      "(tf_msemb.mining.approximate; binary is the one docs/mining.md recommends at scale).")
    flags.DEFINE_integer("cells", None, "IVF cells per side (default: approximate.plan_for's for its size).")
    flags.DEFINE_integer("probes", None, "Cells probed per query (default: the plan's).")
    flags.DEFINE_integer("candidates", None, "Candidates re-scored per query and pool shard (default: the plan's).")
    flags.DEFINE_integer("rounds", 16, "Rounds of max selection in the pipeline (an error asks for more if needed).")
    flags.DEFINE_string("work_dir", None, "The steps' files, for a rerun to resume from (default <output>.work).")
    flags.mark_flags_as_required(["src", "tgt", "output"])


if __name__ == "__main__":
    from tf_msemb.pipelines import mine  # the importable module: workers unpickle its classes by name

    mine.define_flags()
    flags.adopt_module_key_flags(mine)  # listed by --help
    cli.run(mine.main, beam_arguments=True)
