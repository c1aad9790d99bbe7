"""tools/mine_hard_negatives.py on a tiny export: records with hard negatives that train the BiDE's input feature."""

import json
import os

import pytest
import tensorflow as tf

from conftest import REPO
from conftest import corpus_file
from conftest import run
from tf_msemb.data.corpora import corpus_streams
from tf_msemb.data.features import HardNegatives
from tf_msemb.data.pipeline import make_dataset
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.models.encoder import SentenceEncoder

TOOL = os.path.join(REPO, "tools", "mine_hard_negatives.py")


def _records(manifest):
    rows = []
    for files, _ in corpus_streams(str(manifest)).values():
        for record in tf.data.TFRecordDataset(files):
            fields = tf.train.Example.FromString(record.numpy()).features.feature
            rows.append([value.decode() for name in ("src", "tgt", "hard_negatives")
                         for value in fields[name].bytes_list.value])
    return rows


@pytest.mark.slow
def test_mined_records_feed_the_hard_negatives_feature_and_a_rerun_resumes(tokenizer, tmp_path):
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32,
                              max_sequence_length=tokenizer.max_length, pooling=["mean", "max", "first"], pooled_dim=12)
    export = export_saved_model(tokenizer, encoder, str(tmp_path / "export"))
    english = open(corpus_file("train", "en")).read().splitlines()[:60]
    german = open(corpus_file("train", "de")).read().splitlines()[:60]
    (tmp_path / "src.en").write_text("\n".join(english) + "\n")
    (tmp_path / "tgt.de").write_text("\n".join(german) + "\n")
    # An untrained encoder puts all sentences close together: only the truth's copies are near-duplicates here.
    mining = ["--num_negatives=2", "--candidates=6", "--ceiling=0.999"]
    args = [TOOL, f"--model={export}", f"--src={tmp_path}/src.en", f"--tgt={tmp_path}/tgt.de", "--src_lang=en",
            "--tgt_lang=de", *mining, "--chunk_size=16", "--num_shards=2", f"--cache_dir={tmp_path}/cache"]
    out = run([*args, f"--output_dir={tmp_path}/hard"], tmp_path)
    assert "en-de: 60 pairs" in out and "with 2 hard negatives" in out
    manifest = tmp_path / "hard" / "hard.manifest.json"
    rows = _records(manifest)
    assert len(rows) == json.loads(manifest.read_text())["pairs"]["en-de"]["examples"] >= 55
    gold = dict(zip(english, german))
    for src, tgt, *negatives in rows:
        assert gold[src] == tgt and len(negatives) == 2 and tgt not in negatives and set(negatives) <= set(german)

    data = make_dataset(str(manifest), tokenizer, batch_size=4, max_tokens=48, features=[HardNegatives(2)])
    batch = next(iter(data))
    assert batch["hard_negatives"]["token_ids"].shape[:2] == (4, 2)

    chunks = sorted((tmp_path / "cache").glob("en-de.negatives-*/chunk-*.npy"))
    assert len(chunks) == 4  # 60 pairs, 16 a chunk
    written = [c.stat().st_mtime_ns for c in chunks]
    chunks[-1].unlink()  # as if the run had stopped before its last chunk
    run([*args, f"--output_dir={tmp_path}/again"], tmp_path)
    assert [c.stat().st_mtime_ns for c in chunks[:-1]] == written[:-1] and chunks[-1].exists()
    assert _records(tmp_path / "again" / "hard.manifest.json") == rows

    # TFRecords in: the quickstart-style records just written, mined again by the same export.
    out = run([TOOL, f"--model={export}", f"--corpus={manifest}", *mining, f"--output_dir={tmp_path}/from_records"],
              tmp_path)
    assert "en-de:" in out
    assert {tuple(r[:2]) for r in _records(tmp_path / "from_records" / "hard.manifest.json")} <= set(gold.items())
