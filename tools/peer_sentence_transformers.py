"""The sentence-transformers side of `bench_encode.py` and `bench_train.py` (run by them in a child process).

Needs the optional `bench` extra (torch==2.13.0, sentence-transformers 6.2)
in the interpreter that runs it, and no part of tf_msemb:

    python tools/peer_sentence_transformers.py encode --model=DIR --sentences=FILE \
        --batch_size=64 --passes=2 --vectors=OUT.npy [--precision=bfloat16]
    python tools/peer_sentence_transformers.py train --model=DIR --pairs=FILE.jsonl \
        --batch_size=64 --steps=40 --warmup=10

`encode` times `SentenceTransformer.encode` (normalized; `--precision=bfloat16`
runs it under torch's CPU autocast to bfloat16, the counterpart of our
`mixed_bfloat16` exports); `train` times the
seed-001 recipe as sentence-transformers runs it: the student is a copy of
the teacher, `losses.MSELoss` between the student's embeddings of source
and translation and the precomputed teacher vector, AdamW (lr 2e-5), one
batch of `--batch_size` pairs per step. Prints one JSON line with the
throughput and the process's peak RSS.
"""

import argparse
import contextlib
import json
import resource
import time

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers import losses


def _peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def encode(args):
    with open(args.sentences, encoding="utf-8") as f:
        sentences = f.read().split("\n")[:-1]
    model = SentenceTransformer(args.model, device="cpu")
    precision = (torch.autocast("cpu", dtype=torch.bfloat16) if args.precision == "bfloat16"
                 else contextlib.nullcontext())
    with precision:
        model.encode(sentences, batch_size=args.batch_size, normalize_embeddings=True)
        start = time.perf_counter()
        for _ in range(args.passes):
            vectors = model.encode(sentences, batch_size=args.batch_size, normalize_embeddings=True,
                                   convert_to_numpy=True)
        seconds = time.perf_counter() - start
    np.save(args.vectors, vectors.astype(np.float32))
    return {"sentences": len(sentences), "sentences_per_second": args.passes * len(sentences) / seconds}


def train(args):
    with open(args.pairs, encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    needed = (args.warmup + args.steps) * args.batch_size
    if len(pairs) < needed:
        raise SystemExit(f"{args.pairs} has {len(pairs)} pairs; {needed} are needed.")
    model = SentenceTransformer(args.model, device="cpu")
    model.max_seq_length = args.max_length
    model.train()
    loss = losses.MSELoss(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        batch = pairs[step * args.batch_size:(step + 1) * args.batch_size]
        features = [model.tokenize([p[side] for p in batch]) for side in ("src", "tgt")]
        labels = torch.tensor(np.array([p["teacher"] for p in batch], np.float32))
        value = loss(features, labels)
        value.backward()
        optimizer.step()
        optimizer.zero_grad()
    seconds = time.perf_counter() - start
    return {"pairs_per_second": args.steps * args.batch_size / seconds, "final_loss": float(value)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["encode", "train"])
    parser.add_argument("--model", required=True, help="sentence-transformers model directory.")
    parser.add_argument("--sentences", help="encode: one sentence a line.")
    parser.add_argument("--vectors", help="encode: where to save the embeddings (.npy).")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--precision", choices=["float32", "bfloat16"], default="float32",
                        help="encode: bfloat16 = torch CPU autocast.")
    parser.add_argument("--pairs", help="train: jsonl of {src, tgt, teacher}.")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=64)
    args = parser.parse_args()
    result = encode(args) if args.mode == "encode" else train(args)
    result.update(peak_rss_mib=_peak_rss_mib(), torch_threads=torch.get_num_threads())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
