"""Encoding a large corpus to an on-disk embedding array, chunk by chunk, resumably.

The array is a `.npy` file opened as a memory map (float32 or float16), so
neither the encoding nor later searches hold more than a chunk in memory.
After every chunk the rows written so far are recorded in a `.json` beside
it; an interrupted run started again with the same sentences, model and
dtype continues after the last finished chunk. A cache made from other
sentences, another model or another dtype is never reused.
"""

import hashlib
import json
import os

import keras
import numpy as np

from tf_msemb.evaluation.encoding import encode
from tf_msemb.files import write_json_atomically

DTYPES = ("float32", "float16")


def fingerprint(sentences):
    """A short hash of the sentences and their order."""
    digest = hashlib.sha1()
    for sentence in sentences:
        digest.update(sentence.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def cached_embeddings(model, sentences, path, dtype="float16", chunk_size=50_000, batch_size=64, model_id="",
                      verbose=True):
    """Embeddings of `sentences` as a read-only memmap stored at `path` (`.npy`).

    `model` maps a batch of strings to unit vectors; `model_id` names it in
    the cache record, so a cache made with another model is not reused.
    """
    if dtype not in DTYPES:
        raise ValueError(f"Unknown dtype {dtype!r}; choose from {DTYPES}.")
    record_path = f"{path}.json"
    identity = {"sentences": len(sentences), "fingerprint": fingerprint(sentences), "model": model_id, "dtype": dtype}
    record = None
    if os.path.exists(record_path) and os.path.exists(path):
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        if {key: record.get(key) for key in identity} != identity:
            record = None
    done = record["done"] if record else 0
    progress = keras.utils.Progbar(len(sentences), unit_name="sentence", verbose=1 if verbose else 0)
    progress.update(done)
    array = np.load(path, mmap_mode="r+") if record else None
    for start in range(done, len(sentences), chunk_size):
        chunk = encode(model, sentences[start : start + chunk_size], batch_size, verbose=False)
        if array is None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(len(sentences), chunk.shape[1]))
        array[start : start + len(chunk)] = chunk
        array.flush()
        done = start + len(chunk)
        write_json_atomically(record_path, identity | {"done": done, "dim": int(array.shape[1])}, indent=1)
        progress.update(done)
    if array is None:
        raise ValueError(f"No sentences to encode for {path}.")
    del array
    return np.load(path, mmap_mode="r")
