"""Compares LiteRT files written by tools/export_litert.py with the export they came from.

    python tools/check_litert_parity.py --export=runs/e5_export --tflite=runs/e5.tflite \
        --tflite=runs/e5_int8.tflite [--sentences=runs/stsb_text/stsb.dev.de.txt --per_file=1500]

The export encodes with `tf.saved_model.load`, each file in `ai_edge_litert`'s
interpreter with tensorflow-text's kernels (`export.litert.LiteRTModel`), on
the same sentences: the probe sentences (several scripts, accents, full-width
forms, empty, over-long) and the first `--per_file` sentences of each
`--sentences` file, each set scored alone. A `.json` file holds a list of
sentences, or an object whose "sentences" list it is (as the reference
fixtures of `tests/models/test_hf_checkpoints.py` keep theirs, one with a
newline inside); any other file is one sentence a line. Prints the smallest and mean
cosine per file and set; the last line is the same as JSON.
"""

from tf_msemb import cli  # first: it quiets TensorFlow's start-up

import json
import os

from absl import flags

from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.export.litert import LiteRTModel
from tf_msemb.export.reload import PROBE_SENTENCES
from tf_msemb.text_files import CorpusError
from tf_msemb.text_files import read_lines

flags.DEFINE_string("export", None, "The export (or training run) the files were written from.")
flags.DEFINE_multi_string("tflite", None, "A .tflite file written from --export (repeat for several).")
flags.DEFINE_multi_string("sentences", [], "Text files, one sentence a line, or .json lists of sentences (the "
                          "probe sentences always come first).")
flags.DEFINE_integer("per_file", 1500, "Sentences read from each --sentences file: its first ones.")
flags.DEFINE_integer("threads", None, "The interpreter's threads (default: its own).")
flags.mark_flags_as_required(["export", "tflite"])
FLAGS = flags.FLAGS


def read_sentences(path):
    """A text file's lines, or a `.json` file's list of sentences (or its object's "sentences")."""
    if not path.endswith(".json"):
        return read_lines(path)
    with open(path, encoding="utf-8") as f:
        sentences = json.load(f)
    sentences = sentences.get("sentences") if isinstance(sentences, dict) else sentences
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise CorpusError(f"{path} holds neither a list of sentences nor an object with a \"sentences\" list.")
    return sentences


def main(argv):
    del argv
    sets = {"probe": list(PROBE_SENTENCES)}
    sets.update((os.path.basename(path), read_sentences(path)[:FLAGS.per_file]) for path in FLAGS.sentences)
    model = load_model(FLAGS.export)
    expected = {name: encode(model, sentences, verbose=False) for name, sentences in sets.items()}
    rows = {}
    for path in FLAGS.tflite:
        with cli.native_logs_off():  # the interpreter's XNNPACK line
            litert_model = LiteRTModel(path, FLAGS.threads)
            for name, sentences in sets.items():
                cosine = (encode(litert_model, sentences, verbose=False) * expected[name]).sum(axis=1)
                rows.setdefault(os.path.basename(path), {})[name] = {
                    "sentences": len(sentences), "cosine_min": float(cosine.min()), "cosine_mean": float(cosine.mean())}
    for file_name, by_set in rows.items():
        for name, row in by_set.items():
            print(f"{file_name} {name} ({row['sentences']} sentences): cosine min {row['cosine_min']:.6f}, "
                  f"mean {row['cosine_mean']:.6f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    cli.run(main)
