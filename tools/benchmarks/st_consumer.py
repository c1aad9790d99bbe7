"""Loads sentence-transformers directories as their users do, in a process of its own (torch beside no TensorFlow):
the consumer side of tools/check_st_parity.py and tests/export/test_st_directory.py.

    python tools/benchmarks/st_consumer.py requests.json results.json

`requests.json`: `{"sentences": [...], "directories": [...]}`. For each
directory, `results.json` gets the vectors of
`SentenceTransformer(dir).encode` (batches of 8: sentences of several
lengths padded together), the ids of `AutoTokenizer` for the default prompt
+ each sentence (truncated as sentence-transformers truncates), and every
warning transformers logged or Python raised while `AutoModel` and
`AutoTokenizer` loaded it.
"""

import argparse
import io
import json
import logging
import warnings


def main(requests_file, results_file):
    import transformers
    from sentence_transformers import SentenceTransformer

    with open(requests_file, encoding="utf-8") as f:
        requests = json.load(f)
    sentences = requests["sentences"]
    results = {}
    for directory in requests["directories"]:
        model = SentenceTransformer(directory, device="cpu")
        vectors = model.encode(sentences, batch_size=8, convert_to_numpy=True)
        prompt = model.prompts.get(model.default_prompt_name, "") if model.default_prompt_name else ""
        log = io.StringIO()
        handler = logging.StreamHandler(log)
        transformers.utils.logging.set_verbosity_warning()
        transformers.utils.logging.get_logger().addHandler(handler)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
            transformers.AutoModel.from_pretrained(directory)
        transformers.utils.logging.get_logger().removeHandler(handler)
        ids = [tokenizer(prompt + s, truncation=True, max_length=model.max_seq_length)["input_ids"]
               for s in sentences]
        results[directory] = {"vectors": vectors.tolist(), "ids": ids, "log": log.getvalue(),
                              "warnings": [str(w.message) for w in caught], "truncate_dim": model.truncate_dim}
    with open(results_file, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", help="JSON: {\"sentences\": [...], \"directories\": [...]}")
    parser.add_argument("results", help="JSON written: per directory its vectors, token ids and warnings")
    args = parser.parse_args()
    main(args.requests, args.results)
