"""MediaPipe's TextEmbedder on a .tflite file, one text per call: the consumer side of tests/export/test_litert.py.

    .venv-mediapipe/bin/python tools/benchmarks/mediapipe_embed.py embedder.tflite texts.json vectors.npy

Runs in a venv with `mediapipe` alone (`make install` builds `.venv-mediapipe`), never importing tf_msemb or
TensorFlow; writes the vectors as float32 `[len(texts), d]`. `--help` runs anywhere (MediaPipe is imported after
the arguments are read).
"""

import argparse
import json

import numpy as np


def main(model_path, texts_path, output_path):
    from mediapipe.tasks.python import text
    from mediapipe.tasks.python.core.base_options import BaseOptions

    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    options = text.TextEmbedderOptions(base_options=BaseOptions(model_asset_path=model_path))
    with text.TextEmbedder.create_from_options(options) as embedder:
        vectors = [embedder.embed(t).embeddings[0].embedding for t in texts]
    np.save(output_path, np.asarray(vectors, dtype=np.float32))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="The .tflite file (a TextEmbedder model).")
    parser.add_argument("texts", help="A JSON list of texts.")
    parser.add_argument("output", help="The .npy file of the vectors to write.")
    arguments = parser.parse_args()
    main(arguments.model, arguments.texts, arguments.output)
