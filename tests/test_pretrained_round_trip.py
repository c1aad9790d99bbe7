"""Each tiny Hugging Face checkpoint trains a few steps, exports, and serves the same vectors from a process that
imports only tensorflow and tensorflow_text (as a user's server does)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from pretrained_checkpoints import NAMES
from pretrained_checkpoints import checkpoint
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.models.pretrained import load_pretrained
from tf_msemb.objectives.translation_ranking import TranslationRanking

SENTENCES = ["", "Hallo Welt.", "A man is playing a guitar on a stage in front of many people tonight.",
             "Über den Wolken: Café crème, naïve façade.", "东京 and Москва, " * 12, "x"]

# Run in a fresh interpreter: loads every export and writes its vectors (both the call and the signature).
SERVE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the in-graph tokenizers' ops)
paths, sentences, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
vectors = {}
for name, path in paths.items():
    model = tf.saved_model.load(path)
    texts = tf.constant(sentences)
    served = model.signatures["serving_default"](inputs=texts)["outputs"]
    vectors[name] = [model(texts).numpy().tolist(), served.numpy().tolist()]
assert not [m for m in sys.modules if m.startswith("tf_msemb")], "the export must not need tf_msemb"
json.dump(vectors, open(out, "w"))
"""


def _train_and_export(name, records, directory):
    """A few TranslationRanking steps from checkpoint `name`, exported; returns (path, Keras vectors, before)."""
    keras.utils.set_random_seed(0)
    tokenizer, encoder = load_pretrained(checkpoint(name))
    before = l2_normalize(encoder(tokenizer(tf.constant(SENTENCES)))).numpy()
    model = TranslationRanking(encoder)
    model.build()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    batches = iter(make_dataset([records], tokenizer, 4, max_tokens=tokenizer.max_length, shuffle_buffer=0))
    for _ in range(2):
        assert np.isfinite(float(model.train_step(next(batches))["loss"]))
    path = export_saved_model(tokenizer, encoder, os.path.join(directory, name))
    with open(os.path.join(path, "tf_msemb_export.json"), encoding="utf-8") as f:
        assert json.load(f)["inference"] == "packed", name
    return path, l2_normalize(encoder(tokenizer(tf.constant(SENTENCES)))).numpy(), before


@pytest.mark.heavy
@pytest.mark.slow  # six trainings and exports: about 2 minutes on 2 idle cores
@pytest.mark.parametrize("names", [NAMES])
def test_every_checkpoint_trains_exports_and_serves_its_vectors(quickstart_records, tmp_path, names):
    paths, expected = {}, {}
    for name in names:
        paths[name], expected[name], before = _train_and_export(name, quickstart_records, str(tmp_path))
        assert np.abs(expected[name] - before).max() > 1e-3, f"{name}: training did not change the vectors"
    out = tmp_path / "vectors.json"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", SERVE, json.dumps(paths), json.dumps(SENTENCES), str(out)],
                            capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(out.read_text())
    for name in names:
        called, signature = (np.array(v, np.float32) for v in served[name])
        np.testing.assert_allclose(called, expected[name], rtol=0, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(signature, expected[name], rtol=0, atol=1e-5, err_msg=name)
