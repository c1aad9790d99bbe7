"""Where one request's time goes in an export: its stages, its op types and how many ops it runs.

    python tools/benchmarks/profile_request.py --model=runs/minilm_int8 --input=../shared/data/multi30k/val.en.gz \
        --batch_size=1 --requests=200 --intra_op_threads=1

Loads the export as TF Serving does (a v1 Session over the `serve`
MetaGraph, the `serving_default` signature) and sends `--requests` requests
of `--batch_size` random benchmark sentences (`bench_encode.py`'s, after 10
warm-up requests): first untraced, for the p50 wall time, then traced
(`RunOptions.FULL_TRACE`), where TensorFlow records every executed op with
its start and end. The tables sum, per request (medians over the traced
requests):

- by stage (`STAGES`: text normalization and tokenization, control flow
  and function calls, gathers and reshuffles, matmuls, attention's other
  ops, layer norms and elementwise math): ops executed and their time;
- by op type, the `--top` most expensive;
- the request's traced span (first op's start to last op's end), the op
  time summed, and the untraced p50: what the span does not cover is the
  Session's own overhead, and span minus op time is time between ops
  (dispatch, or ops waiting on one another; negative when ops overlap).

Tracing itself adds per-op cost, so the traced span exceeds the untraced
p50; the shares are what to read.
"""

import collections
import re
import statistics
import time

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import numpy as np
import tensorflow as tf
from absl import flags

import serving_session
import traffic

serving_session.define_flags()
flags.adopt_module_key_flags(serving_session)  # listed by --help
flags.DEFINE_integer("batch_size", 1, "Sentences per request.")
flags.DEFINE_integer("requests", 200, "Requests timed, and requests traced.")
flags.DEFINE_integer("top", 15, "Op types listed.")
FLAGS = flags.FLAGS

# Op types by stage, matched in order against the op type (first match wins); the rest is "other".
STAGES = (
    ("text", r"UTF8|Utf8|Unicode|Regex|Sentencepiece|SentencePiece|Wordpiece|WordPiece|Tokeniz|Lookup|HashTable|"
             r"StringSplit|StaticRegex|CaseFold|Normalize"),
    ("control", r"^(If|StatelessIf|While|StatelessWhile|PartitionedCall|StatefulPartitionedCall|Switch|Merge|"
                r"Enter|Exit|NextIteration|LoopCond|Identity|IdentityN|NoOp|_Arg|_Retval|_Recv|_Send|Const|"
                r"Placeholder|ReadVariableOp|VarHandleOp)$"),
    ("gather", r"Gather|Scatter|Ragged|Concat|Split|Slice|Reshape|Transpose|Pack|Unpack|Pad|Tile|Range|Shape|"
               r"Size|Fill|Where|Cumsum|Squeeze|ExpandDims|Cast|Argsort|TopK|InvertPermutation|BroadcastTo|Segment"),
    ("matmul", r"MatMul|Conv"),
    ("layer norm", r"LayerNorm|FusedBatchNorm|Mean|Rsqrt|SquaredDifference|Moments"),
    ("attention", r"Softmax|Max$|Exp|Select"),
)


def stage_of(op_type):
    for stage, pattern in STAGES:
        if re.search(pattern, op_type):
            return stage
    return "other"


def _op_type(node):
    """The op type of a traced node: its timeline label reads `name = OpType(inputs)`."""
    return node.timeline_label.split(" = ")[-1].split("(")[0] or node.node_name


def traced_request(run, request):
    """`(span micros, [(op type, micros)])` of one request run with a full trace."""
    metadata = tf.compat.v1.RunMetadata()
    run(request, tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE), metadata)
    nodes = [node for device in metadata.step_stats.dev_stats for node in device.node_stats
             if not node.node_name.startswith("_SOURCE")]
    starts = [node.all_start_micros for node in nodes]
    ends = [node.all_start_micros + node.all_end_rel_micros for node in nodes]
    return max(ends) - min(starts), [(_op_type(node), node.all_end_rel_micros) for node in nodes]


def _tally(ops, key):
    table = collections.defaultdict(lambda: [0, 0])
    for op_type, micros in ops:
        table[key(op_type)][0] += 1
        table[key(op_type)][1] += micros
    return table


def _medians(tables):
    """Per key, the median over requests of `(count, micros)` (0 where a request ran none)."""
    median = statistics.median
    return {key: (median(t.get(key, (0, 0))[0] for t in tables), median(t.get(key, (0, 0))[1] for t in tables))
            for key in set().union(*tables)}


def profile(run, stream):
    """Per-request medians: span, op time, op count, and per stage / op type `(count, micros)`."""
    traced = [traced_request(run, request) for request in stream]
    median = statistics.median
    return {"span": median(span for span, _ in traced),
            "op_time": median(sum(micros for _, micros in ops) for _, ops in traced),
            "ops": median(len(ops) for _, ops in traced),
            "stages": _medians([_tally(ops, stage_of) for _, ops in traced]),
            "types": _medians([_tally(ops, lambda op_type: op_type) for _, ops in traced])}


def _table(title, rows, total):
    print(f"\n| {title} | ops / request | ms / request | share of op time |")
    print("|---|---|---|---|")
    for name, (count, micros) in rows:
        print(f"| {name} | {count:g} | {micros / 1000:.3f} | {micros / max(total, 1):.1%} |")


def main(argv):
    del argv
    sentences = serving_session.prepare(FLAGS)
    stream = traffic.requests(sentences, 10 + 2 * FLAGS.requests, FLAGS.batch_size, FLAGS.batch_size)
    with serving_session.serving_session(FLAGS.model) as run:
        for request in stream[:10]:
            run(request)
        seconds = []
        for request in stream[10:10 + FLAGS.requests]:
            start = time.perf_counter()
            run(request)
            seconds.append(time.perf_counter() - start)
        result = profile(run, stream[10 + FLAGS.requests:])
    p50 = float(np.median(seconds)) * 1e6
    print(f"{FLAGS.model}: batch {FLAGS.batch_size}, intra-op threads {FLAGS.intra_op_threads or 'TF default'}, "
          f"{FLAGS.requests} requests")
    print(f"untraced p50 {p50 / 1000:.3f} ms; traced: span {result['span'] / 1000:.3f} ms, "
          f"op time {result['op_time'] / 1000:.3f} ms, {result['ops']:g} ops executed")
    stages = sorted(result["stages"].items(), key=lambda item: -item[1][1])
    _table("stage", stages, result["op_time"])
    types = sorted(result["types"].items(), key=lambda item: -item[1][1])[:FLAGS.top]
    _table("op type", types, result["op_time"])


if __name__ == "__main__":
    cli.run(main)
