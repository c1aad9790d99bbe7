"""tf_msemb.pipelines.encode under 2 worker processes: the export's vectors, ids of first occurrences, shards."""

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter

from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.pipelines import encode as encode_pipeline
from tf_msemb.quickstart import CORPUS_DIR
from tf_msemb.text_files import CorpusError


def _corpus(tmp_path):
    with open(f"{CORPUS_DIR}/train.de.txt", encoding="utf-8") as f:
        lines = f.read().splitlines()[:300]
    first = lines[:150] + ["", "   "] + lines[:20]  # blank lines, and repeats of earlier lines
    (tmp_path / "a.txt").write_text("\n".join(first) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_bytes(("\n".join(lines[140:]) + "\n").encode() + b"caf\xe9 latin-1\n")
    return [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], first, lines[140:]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_pipeline_vectors_are_the_exports_under_first_occurrence_ids(export, tmp_path, beam_options, dtype):
    files, first, second = _corpus(tmp_path)
    pipeline = beam.Pipeline(options=beam_options)
    _ = pipeline | encode_pipeline.EncodeCorpus(files, export, str(tmp_path / "out"), num_shards=3, dtype=dtype,
                                                batch_size=16)
    pipeline.run().wait_until_finish()
    manifest = encode_pipeline.read_manifest(str(tmp_path / "out"))
    shards = [encode_pipeline.read_shard(path) for path in encode_pipeline.shard_paths(str(tmp_path / "out"))]
    ids = np.concatenate([s[0] for s in shards])
    vectors = np.concatenate([s[1] for s in shards])
    texts = [text for s in shards for text in s[2]]
    expected_ids = {}
    for index, lines in enumerate((first, second)):
        for number, line in enumerate(lines, start=1):
            if line.strip():
                expected_ids.setdefault(line, encode_pipeline.sentence_id(index, number))
    assert dict(zip(texts, ids.tolist())) == expected_ids and len(texts) == len(expected_ids) == manifest["sentences"]
    assert all(list(s[0]) == sorted(s[0]) and all(i % 3 == shard for i in s[0]) for shard, s in enumerate(shards))
    assert vectors.dtype == dtype and manifest["dim"] == 16 and manifest["malformed"] == 1
    letters = (tmp_path / "out" / "dead_letters.tsv").read_text().splitlines()
    assert [letter.split("\t")[:2] for letter in letters] == [[files[1], str(len(second) + 1)]]
    reference = encode(load_model(export), texts, batch_size=7, verbose=False)
    # float16 storage rounds each value (half a float16 step, 2**-11 relative) of a vector within 1e-6 of the
    # export's; comparing with the reference rounded too would flip a value that lies on a rounding boundary.
    np.testing.assert_allclose(vectors.astype(np.float32), reference, atol=1e-6,
                               rtol=2.0**-11 if dtype == "float16" else 0)


def _run(files, export, output_dir, beam_options, num_shards=3):
    """Runs the pipeline; returns its `sentences` counter (sentences encoded) and the shards read back."""
    pipeline = beam.Pipeline(options=beam_options)
    _ = pipeline | encode_pipeline.EncodeCorpus(files, export, output_dir, num_shards=num_shards, batch_size=16)
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("sentences"))["counters"]
    return (sum(counter.attempted for counter in counters),
            [encode_pipeline.read_shard(path) for path in encode_pipeline.shard_paths(output_dir)])


@pytest.mark.slow
def test_a_rerun_encodes_only_the_shards_not_written(export, tmp_path, beam_options):
    files, _, _ = _corpus(tmp_path)
    output = str(tmp_path / "out")
    encoded, shards = _run(files, export, output, beam_options)
    assert encoded == sum(len(ids) for ids, _, _ in shards)
    # As a run stopped after writing shards 0 and 2 leaves the directory.
    (tmp_path / "out" / encode_pipeline.shard_name(1, 3)).unlink()
    (tmp_path / "out" / encode_pipeline.MANIFEST).unlink()
    kept = (tmp_path / "out" / encode_pipeline.shard_name(0, 3)).stat().st_mtime_ns
    encoded, resumed = _run(files, export, output, beam_options)
    assert encoded == len(shards[1][0])
    assert (tmp_path / "out" / encode_pipeline.shard_name(0, 3)).stat().st_mtime_ns == kept
    for (ids, vectors, texts), (ids_again, vectors_again, texts_again) in zip(shards, resumed):
        assert ids.tolist() == ids_again.tolist() and texts == texts_again
        np.testing.assert_array_equal(vectors, vectors_again)
    with pytest.raises(CorpusError, match="holds vectors of another corpus, model, shard count or dtype"):
        _run(files, export, output, beam_options, num_shards=4)
    (tmp_path / "out" / encode_pipeline.SETTINGS).unlink()
    with pytest.raises(CorpusError, match="holds vector shards but no encode.settings.json"):
        _run(files, export, output, beam_options)
