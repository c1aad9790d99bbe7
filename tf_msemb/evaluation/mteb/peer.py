"""The sentence-transformers side of `evaluation.mteb.run`: MTEB on a sentence-transformers model directory.

    PYTHONPATH=<tf_msemb checkout> python -m tf_msemb.evaluation.mteb.peer REQUEST.json

Runs in any interpreter with sentence-transformers, torch and mteb (a peer
venv): it imports neither TensorFlow nor any other part of tf_msemb than
`evaluation.mteb.tasks`, whose local tasks it rebuilds from the request's
specs so both sides score the same rows. The model runs through MTEB's own
`SentenceTransformerEncoderWrapper` (its prompts, batching and similarity),
its results go to MTEB's folder under the request's `output`, and the last
stdout line is `{"name": ..., "scores": [[task, subset, split, main x100], ...]}`.
"""

import argparse
import json
import os

import mteb
from sentence_transformers import SentenceTransformer

from tf_msemb.evaluation.mteb.tasks import main_scores
from tf_msemb.evaluation.mteb.tasks import task_from_spec


def main(request_file):
    with open(request_file, encoding="utf-8") as f:
        request = json.load(f)
    name = f"sentence-transformers/{os.path.basename(request['model'].rstrip(os.sep))}"
    model = mteb.models.SentenceTransformerEncoderWrapper(SentenceTransformer(request["model"], device="cpu"),
                                                          model_prompts=request["model_prompts"])
    model.mteb_model_meta = model.mteb_model_meta.model_copy(update={"name": name, "revision": "local"})
    tasks = [task_from_spec(spec) for spec in request["local"]]
    if request["tasks"]:
        tasks += list(mteb.get_tasks(tasks=request["tasks"], languages=request["languages"] or None,
                                     exclusive_language_filter=bool(request["languages"])))
    result = mteb.evaluate(model, tasks, cache=mteb.ResultCache(request["output"]), overwrite_strategy="always",
                           encode_kwargs={"batch_size": request["batch_size"], "show_progress_bar": False},
                           show_progress_bar=False)
    print(json.dumps({"name": name, "scores": [[*key, score] for key, score in main_scores(result).items()]}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", help="JSON file written by evaluation.mteb.run.evaluate_peer")
    main(parser.parse_args().request)
