"""Compares a sentence-transformers directory written by tools/export_hf.py with the export it came from.

    python tools/check_st_parity.py --export=runs/minilm_export --directory=runs/minilm_st \
        [--sentences=my_sentences.txt --per_file=200] [--peer_python=/path/to/st-venv/bin/python]

The export encodes in this process; `SentenceTransformer(directory).encode`,
transformers' `AutoTokenizer` and `AutoModel` run in `--peer_python` (any
interpreter with sentence-transformers and torch; default this one), as
their users run them. Prints the cosine between the two sets of vectors
(min and mean), how many sentences get the same token ids, and what
transformers warned while it loaded the directory; the last line is the
same as JSON. Without `--sentences`, a few sentences in several scripts
(accents, full-width forms, empty, over-long).
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import json
import os
import sys
import tempfile

import numpy as np
from absl import flags

from tf_msemb import interpreter
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.export.reload import PROBE_SENTENCES
from tf_msemb.export.reload import read_metadata
from tf_msemb.export.reload import rebuild_tokenizer
from tf_msemb.export.saved_model import resolve_export
from tf_msemb.text_files import read_lines

flags.DEFINE_string("export", None, "The export (or training run) the directory was written from.")
flags.DEFINE_string("directory", None, "The sentence-transformers directory.")
flags.DEFINE_multi_string("sentences", [], "Text files, one sentence a line (default: a few built-in sentences).")
flags.DEFINE_integer("per_file", 200, "Sentences read from each --sentences file: its first ones.")
flags.DEFINE_string("peer_python", None, "Interpreter with sentence-transformers and torch (default: this one).")
flags.mark_flags_as_required(["export", "directory"])
FLAGS = flags.FLAGS
CONSUMER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks", "st_consumer.py")


def main(argv):
    del argv
    python = FLAGS.peer_python or sys.executable
    interpreter.require(python, ["sentence_transformers", "torch"], "sentence-transformers and torch")
    sentences = [line for path in FLAGS.sentences for line in read_lines(path)[:FLAGS.per_file]] or list(
        PROBE_SENTENCES)
    directory = os.path.abspath(FLAGS.directory)
    with tempfile.TemporaryDirectory() as work:
        requests, results = os.path.join(work, "requests.json"), os.path.join(work, "results.json")
        with open(requests, "w", encoding="utf-8") as f:
            json.dump({"sentences": sentences, "directories": [directory]}, f)
        interpreter.run([CONSUMER, requests, results], "sentence-transformers", python)
        with open(results, encoding="utf-8") as f:
            result = json.load(f)[directory]
    theirs = np.asarray(result["vectors"], np.float32)
    ours = encode(load_model(FLAGS.export), sentences, verbose=False)
    ours = ours[:, :theirs.shape[1]]
    norms = np.maximum(np.linalg.norm(theirs, axis=1) * np.linalg.norm(ours, axis=1), 1e-12)
    cosine = (theirs * ours).sum(1) / norms
    export = resolve_export(FLAGS.export)
    tokenizer = rebuild_tokenizer(export, read_metadata(export)["tokenizer"])
    ids = tokenizer.tokenize(sentences).to_list()
    same = sum(a == b for a, b in zip(ids, result["ids"]))
    warnings = [line for line in result["log"].splitlines() if line.strip()] + result["warnings"]
    print(f"{len(sentences)} sentences: cosine min {cosine.min():.6f}, mean {cosine.mean():.6f}; token ids equal "
          f"for {same}; transformers warnings: {len(warnings)}")
    for line in warnings:
        print(f"  {line}")
    print(json.dumps({"sentences": len(sentences), "cosine_min": float(cosine.min()),
                      "cosine_mean": float(cosine.mean()), "ids_equal": same, "warnings": warnings}))


if __name__ == "__main__":
    cli.run(main)
