"""tf_msemb.pipelines.teacher under 2 worker processes: the export's vectors on the records that lacked one."""

import json
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf

from random_weights import randomize
from tf_msemb.data.corpora import corpus_streams
from tf_msemb.data.features import TeacherVectors
from tf_msemb.data.records import check_shards
from tf_msemb.data.teacher_vectors import add_teacher_vectors
from tf_msemb.data.teacher_vectors import with_teacher
from tf_msemb.data.readers import aligned_pairs
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.export.saved_model import export_saved_model
from tf_msemb.inference.packed import packed_embedder
from tf_msemb.models.encoder import SentenceEncoder
from tf_msemb.pipelines.teacher import AddTeacherVectors
from tf_msemb.quickstart import CORPUS_DIR
from tf_msemb.text_files import CorpusError


def _fields(record):
    fields = tf.train.Example.FromString(record).features.feature
    teacher = np.array(fields["teacher"].float_list.value, np.float32) if "teacher" in fields else None
    return fields["src"].bytes_list.value[0].decode(), fields["tgt"].bytes_list.value[0].decode(), teacher


def _shards(manifest):
    return {pair: [[_fields(r) for r in tf.data.TFRecordDataset(path).as_numpy_iterator()] for path in files]
            for pair, (files, _) in corpus_streams(manifest).items()}


def test_records_without_a_teacher_get_the_exports_vector_and_the_others_stay(tmp_path, export, beam_options):
    files = {lang: f"{CORPUS_DIR}/train.{lang}.txt" for lang in ("en", "de", "fr")}
    write_tfrecords(aligned_pairs(files, "en"), str(tmp_path / "in"), "c", 2, verbose=False)
    # The first 5 records of one shard already carry a (16-wide) teacher vector.
    first = tmp_path / "in" / "c.en-de.tfrecord-00000-of-00002"
    records = list(tf.data.TFRecordDataset(str(first)).as_numpy_iterator())
    with tf.io.TFRecordWriter(str(first)) as writer:
        for index, record in enumerate(records):
            writer.write(with_teacher(record, np.full(16, 0.25)) if index < 5 else record)
    before = _shards(str(tmp_path / "in" / "c.manifest.json"))

    pipeline = beam.Pipeline(options=beam_options)
    _ = pipeline | AddTeacherVectors(str(tmp_path / "in" / "c.manifest.json"), export, str(tmp_path / "out"), 16)
    pipeline.run().wait_until_finish()

    manifest = str(tmp_path / "out" / "c.manifest.json")
    with open(manifest, encoding="utf-8") as f:
        assert json.load(f)["teacher"] == {"model": export, "dim": 16}
    after = _shards(manifest)
    sentences = sorted({src for shards in after.values() for shard in shards for src, _, _ in shard})
    expected = dict(zip(sentences, encode(load_model(export), sentences, verbose=False)))
    for pair, shards in after.items():
        for old, new in zip(before[pair], shards):
            assert [row[:2] for row in new] == [row[:2] for row in old]  # same records, same order
            for (src, _, vector), (_, _, given) in zip(new, old):
                expected_vector = given if given is not None else expected[src]
                np.testing.assert_allclose(vector, expected_vector, atol=1e-6, rtol=0)
    assert sum(row[2] is not None for shards in before.values() for shard in shards for row in shard) == 5
    check_shards(corpus_streams(manifest)["en-de"][0], [TeacherVectors(16)])


def test_the_corpus_directory_is_refused_as_output(tmp_path, export):
    write_tfrecords(aligned_pairs({lang: f"{CORPUS_DIR}/train.{lang}.txt" for lang in ("en", "de")}, "en"),
                    str(tmp_path), "c", 1, verbose=False)
    with pytest.raises(CorpusError, match="is the corpus' own directory"):
        AddTeacherVectors(str(tmp_path / "c.manifest.json"), export, str(tmp_path))


def test_the_pipeline_gives_precompute_teachers_vectors(tmp_path, tokenizer, quickstart_records, beam_options):
    """A normalizing teacher: its export through the pipeline, and `precompute_teacher.py`'s packed path over the
    same weights, write the same vector into every record."""
    tf.keras.utils.set_random_seed(5)
    encoder = SentenceEncoder(tokenizer.vocabulary_size, hidden_dim=16, num_layers=1, num_heads=2,
                              intermediate_dim=32, max_sequence_length=tokenizer.max_length, normalize=True)
    export = export_saved_model(tokenizer, randomize(encoder), str(tmp_path / "export"))
    add_teacher_vectors(quickstart_records, tokenizer, encoder, "t", str(tmp_path / "precomputed"), verbose=False,
                        embed=packed_embedder(tokenizer, encoder))
    pipeline = beam.Pipeline(options=beam_options)
    _ = pipeline | AddTeacherVectors(quickstart_records, export, str(tmp_path / "beam"), 16)
    pipeline.run().wait_until_finish()
    name = os.path.basename(quickstart_records)
    precomputed, piped = _shards(str(tmp_path / "precomputed" / name)), _shards(str(tmp_path / "beam" / name))
    assert precomputed.keys() == piped.keys()
    for pair, shards in precomputed.items():
        for ours, theirs in zip(shards, piped[pair], strict=True):
            assert [row[:2] for row in ours] == [row[:2] for row in theirs]
            np.testing.assert_allclose(np.stack([row[2] for row in ours]), np.stack([row[2] for row in theirs]),
                                       atol=1e-6, rtol=0)
