"""MediaPipe's TextEmbedder on a .tflite file, one text per call: the consumer side of tests/export/test_litert.py.

    .venv-mediapipe/bin/python tools/benchmarks/mediapipe_embed.py embedder.tflite texts.json vectors.npy

Runs in a venv with `mediapipe` alone (`make mediapipe`), never importing tf_msemb or TensorFlow; writes the
vectors as float32 `[len(texts), d]`.
"""

import json
import sys

import numpy as np
from mediapipe.tasks.python import text
from mediapipe.tasks.python.core.base_options import BaseOptions


def main(model_path, texts_path, output_path):
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    options = text.TextEmbedderOptions(base_options=BaseOptions(model_asset_path=model_path))
    with text.TextEmbedder.create_from_options(options) as embedder:
        vectors = [embedder.embed(t).embeddings[0].embedding for t in texts]
    np.save(output_path, np.asarray(vectors, dtype=np.float32))


if __name__ == "__main__":
    main(*sys.argv[1:])
