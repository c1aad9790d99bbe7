"""MTEB on exports (the `mteb` extra): encoder.py (an export as MTEB's encoder), tasks.py (local STS and bitext
tasks), run.py (tasks, results folder, table) and peer.py (the sentence-transformers side, run in a peer's
interpreter: it imports mteb and sentence-transformers, never TensorFlow)."""
