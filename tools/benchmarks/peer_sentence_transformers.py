"""The sentence-transformers side of `bench_encode.py` and `bench_train.py` (run by them in a child process).

Needs sentence-transformers and torch==2.13.0 in the interpreter that runs
it, and no part of tf_msemb. `--backend` picks how `SentenceTransformer.encode` runs:
`torch` (float32), `torch-bf16` (torch's CPU autocast to bfloat16, the
counterpart of our `mixed_bfloat16` exports), and, with sentence-transformers
5.x and `optimum[onnxruntime]` / `optimum-intel[openvino]` (transformers
4.x), `onnx`, `onnx-qint8` (their `export_dynamic_quantized_onnx_model` with the preset
for this CPU: `avx512_vnni`, `avx512` or `avx2`), `openvino` and
`openvino-qint8` (their `export_static_quantized_openvino_model`, calibrated
on `--sentences` read as a local dataset, so nothing downloads):

    python tools/benchmarks/peer_sentence_transformers.py prepare --backend=openvino-qint8 --model=DIR --output=DIR2 \
        --sentences=CALIBRATION.txt
    python tools/benchmarks/peer_sentence_transformers.py throughput|latency|traffic --backend=openvino-qint8 --model=DIR2 \
        --file_name=FILE --sentences=FILE --batch_size=64 --passes=2 --vectors=OUT.npy
    python tools/benchmarks/peer_sentence_transformers.py train --model=DIR --pairs=FILE.jsonl \
        --batch_size=64 --steps=40 --warmup=10

`prepare` copies the model and writes the backend's files into the copy
(untimed), printing the model directory and file to load; `throughput` times
`SentenceTransformer.encode` (normalized) over the sentences, `latency` and
`traffic` run `traffic.py`'s request streams, with `--threads` threads inside
one op (0: the backend's default). `train` times the seed-001
recipe as sentence-transformers runs it: the student is a copy of the
teacher, `losses.MSELoss` between the student's embeddings of source and
translation and the precomputed teacher vector, AdamW (lr 2e-5), one batch
of `--batch_size` pairs per step. Each prints one JSON line with its figures
and the process's peak RSS.
"""

import argparse
import contextlib
import csv
import glob
import json
import os
import shutil
import time

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers import losses

import traffic

FILES = {"onnx": "onnx/model.onnx", "openvino": "openvino/openvino_model.xml",
         "openvino-qint8": "openvino/openvino_model_qint8_quantized.xml"}


def _read_sentences(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def _onnx_quantization():
    """sentence-transformers' dynamic int8 ONNX preset for the best instruction set this CPU has."""
    with open("/proc/cpuinfo") as f:
        flags = set(next(line for line in f if line.startswith("flags")).split())
    return "avx512_vnni" if "avx512_vnni" in flags else "avx512" if "avx512f" in flags else "avx2"


def _load(args, backend=None, file_name=None):
    """The model on `backend`; with `--threads` its runtime's threads inside one op (torch's intra-op threads,
    ONNX Runtime's `intra_op_num_threads`, OpenVINO's `INFERENCE_NUM_THREADS`)."""
    backend = backend or args.backend
    kind = {"torch-bf16": "torch", "onnx-qint8": "onnx", "openvino-qint8": "openvino"}.get(backend, backend)
    kwargs = {"file_name": file_name} if file_name else {}
    if args.threads and kind == "torch":
        torch.set_num_threads(args.threads)
    elif args.threads and kind == "onnx":
        import onnxruntime

        kwargs["session_options"] = onnxruntime.SessionOptions()
        kwargs["session_options"].intra_op_num_threads = args.threads
    elif args.threads:
        kwargs["ov_config"] = {"INFERENCE_NUM_THREADS": str(args.threads)}
    return SentenceTransformer(args.model, device="cpu", backend=kind, model_kwargs=kwargs)


def prepare(args):
    """Copies the model to `--output` and writes the backend's files there; returns what to load.

    An `--output` that a finished `prepare` wrote is reused as it is.
    """
    done = os.path.join(args.output, "prepared.json")
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            return json.load(f)
    shutil.rmtree(args.output, ignore_errors=True)
    prepared = _prepare(args)
    with open(done, "w", encoding="utf-8") as f:
        json.dump(prepared, f)
    return prepared


def _prepare(args):
    shutil.copytree(args.model, args.output)
    args.model = args.output
    if args.backend in ("torch", "torch-bf16"):
        return {"model": args.output, "file_name": ""}
    if args.backend in ("onnx", "onnx-qint8"):
        from sentence_transformers import export_dynamic_quantized_onnx_model

        model = _load(args, "onnx")
        model.save_pretrained(args.output)
        if args.backend == "onnx":
            return {"model": args.output, "file_name": FILES["onnx"]}
        preset = _onnx_quantization()
        export_dynamic_quantized_onnx_model(model, preset, args.output)
        (written,) = glob.glob(f"model_*int8_{preset}.onnx", root_dir=os.path.join(args.output, "onnx"))
        return {"model": args.output, "file_name": f"onnx/{written}"}
    model = _load(args, "openvino")
    model.save_pretrained(args.output)
    if args.backend == "openvino-qint8":
        from sentence_transformers import export_static_quantized_openvino_model

        calibration = args.output + "_calibration"
        os.makedirs(calibration, exist_ok=True)
        with open(os.path.join(calibration, "train.csv"), "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence"])
            writer.writerows([s] for s in _read_sentences(args.sentences))
        export_static_quantized_openvino_model(model, None, args.output, dataset_name=calibration,
                                               dataset_config_name="default", dataset_split="train",
                                               column_name="sentence")
    return {"model": args.output, "file_name": FILES[args.backend]}


def _precision(args):
    return torch.autocast("cpu", dtype=torch.bfloat16) if args.backend == "torch-bf16" else contextlib.nullcontext()


def throughput(args):
    sentences = _read_sentences(args.sentences)
    model = _load(args, file_name=args.file_name)
    with _precision(args):
        model.encode(sentences, batch_size=args.batch_size, normalize_embeddings=True)
        start = time.perf_counter()
        for _ in range(args.passes):
            vectors = model.encode(sentences, batch_size=args.batch_size, normalize_embeddings=True,
                                   convert_to_numpy=True)
        seconds = time.perf_counter() - start
    np.save(args.vectors, vectors.astype(np.float32))
    return {"sentences": len(sentences), "sentences_per_second": args.passes * len(sentences) / seconds}


def serve(args):
    """`latency` or `traffic`: requests of `traffic.py`, each one `encode` call."""
    sentences = _read_sentences(args.sentences)
    model = _load(args, file_name=args.file_name)

    def embed(request):
        return model.encode(request, batch_size=len(request), normalize_embeddings=True, convert_to_numpy=True)

    with _precision(args):
        if args.mode == "traffic":
            return traffic.varied_traffic(embed, sentences, args.traffic_requests)
        return traffic.latency(embed, sentences, 1, args.latency_requests) | traffic.latency(
            embed, sentences, 8, args.latency_requests)


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
    parser.add_argument("mode", choices=["prepare", "throughput", "latency", "traffic", "train"])
    parser.add_argument("--backend", choices=["torch", "torch-bf16", "onnx", "onnx-qint8", "openvino",
                                              "openvino-qint8"], default="torch")
    parser.add_argument("--output", help="prepare: the model copy to write.")
    parser.add_argument("--file_name", default="", help="the backend's model file, as `prepare` printed it.")
    parser.add_argument("--latency_requests", type=int, default=200)
    parser.add_argument("--traffic_requests", type=int, default=1000)
    parser.add_argument("--model", required=True, help="sentence-transformers model directory.")
    parser.add_argument("--sentences", help="one sentence a line (prepare: the calibration sentences).")
    parser.add_argument("--vectors", help="throughput: where to save the embeddings (.npy).")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--pairs", help="train: jsonl of {src, tgt, teacher}.")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="threads inside one op (0: the backend's default).")
    parser.add_argument("--batch_size", type=int, default=64)
    args = parser.parse_args()
    run = {"prepare": prepare, "throughput": throughput, "latency": serve, "traffic": serve, "train": train}[args.mode]
    result = run(args)
    result.update(peak_rss_mib=traffic.peak_rss_mib(), torch_threads=torch.get_num_threads())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
