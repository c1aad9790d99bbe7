import collections

import pytest
import tensorflow as tf

from tf_msemb.data.pipeline import make_dataset
from tf_msemb.data.pipeline import make_distributed_dataset
from tf_msemb.data.corpora import stream_weights
from tf_msemb.text_files import CorpusError
from tf_msemb.data.writing import write_tfrecords
from tf_msemb.data import features as F


def _corpus(tmp_path, name, sizes, num_shards=2, long_every=0):
    """A manifest corpus; the target of pair `en-xx` row i is `xx<i>` (a few are very long)."""
    sources = []
    for lang, n in sizes.items():
        rows = [
            (f"source {i}", f"{lang}{i}" + (" lang" * 80 if long_every and i % long_every == 0 else ""))
            for i in range(n)
        ]
        sources.append(("en", lang, rows))
    write_tfrecords(sources, str(tmp_path / name), name, num_shards, verbose=False)
    return str(tmp_path / name / f"{name}.manifest.json")


def _targets(dataset, batches):
    out = []
    for batch in dataset.take(batches):
        out.extend(t.decode() for t in batch["tgt_text"].numpy())
    return out


def test_batch_structure(tokenizer, quickstart_records):
    ds = make_dataset([quickstart_records], tokenizer, batch_size=8, max_tokens=48)
    batch = next(iter(ds))
    for side in ("src", "tgt"):
        ids, mask = batch[side]["token_ids"], batch[side]["padding_mask"]
        assert ids.shape[0] == 8 and ids.shape == mask.shape
        assert ids.dtype == tf.int32 and mask.dtype == tf.bool
        assert (ids.numpy()[~mask.numpy()] == tokenizer.pad_id).all()
        assert (ids.numpy()[:, 0] == tokenizer.bos_id).all()
        assert mask.numpy().sum(axis=1).max() == ids.shape[1]


def test_overlong_pairs_are_dropped(tokenizer, tmp_path):
    corpus = _corpus(tmp_path, "c", {"de": 60}, long_every=3)
    ds = make_dataset(corpus, tokenizer, batch_size=4, max_tokens=48, repeat=False, drop_remainder=False, features=[F.RawText()])
    targets = _targets(ds, 100)
    assert sorted(targets) == sorted(f"de{i}" for i in range(60) if i % 3)


def test_truncate_keeps_overlong_pairs_cut_to_max_tokens_with_their_end_token(tokenizer, tmp_path):
    corpus = _corpus(tmp_path, "c", {"de": 12}, long_every=3)
    ds = make_dataset(corpus, tokenizer, batch_size=12, max_tokens=20, repeat=False, drop_remainder=False,
                      truncate=True, features=[F.RawText()])
    batch = next(iter(ds))
    ids, mask = batch["tgt"]["token_ids"].numpy(), batch["tgt"]["padding_mask"].numpy()
    targets = [t.decode() for t in batch["tgt_text"].numpy()]
    assert sorted(t.split()[0] for t in targets) == sorted(f"de{i}" for i in range(12)) and ids.shape[1] == 20
    for row, text in enumerate(targets):
        full = tokenizer.tokenize([text], truncate=False)[0].numpy()
        if len(full) > 20:
            expected = [*full[:19], tokenizer.eos_id]
        else:
            expected = list(full)
        assert ids[row][mask[row]].tolist() == expected, text
    assert any(len(tokenizer.tokenize([t], truncate=False)[0]) > 20 for t in targets)


def test_language_pairs_are_balanced_by_default(tokenizer, tmp_path):
    corpus = _corpus(tmp_path, "c", {"de": 400, "fr": 20})
    ds = make_dataset(corpus, tokenizer, batch_size=50, max_tokens=48, features=[F.RawText()], shuffle_buffer=100)
    counts = collections.Counter(t[:2] for t in _targets(ds, 20))
    assert abs(counts["de"] - counts["fr"]) < 0.15 * 1000
    proportional = make_dataset(corpus, tokenizer, batch_size=50, max_tokens=48, features=[F.RawText()], proportional=True)
    counts = collections.Counter(t[:2] for t in _targets(proportional, 20))
    assert counts["fr"] < 0.1 * 1000


def test_configurable_weights(tokenizer, tmp_path):
    a = _corpus(tmp_path, "a", {"de": 100})
    b = _corpus(tmp_path, "b", {"fr": 100})
    weights = stream_weights([a, b], corpus_weights={a: 3.0})
    assert [round(w, 3) for _, w in weights] == [0.75, 0.25]
    ds = make_dataset([a, b], tokenizer, batch_size=50, max_tokens=48, features=[F.RawText()], corpus_weights={a: 3.0})
    counts = collections.Counter(t[:2] for t in _targets(ds, 20))
    assert 0.68 < counts["de"] / 1000 < 0.82
    pair_weights = stream_weights([_corpus(tmp_path, "m", {"de": 10, "fr": 10})], pair_weights={"en-fr": 0.0})
    assert [w for _, w in pair_weights] == [1.0, 0.0]
    with pytest.raises(ValueError, match="not in `corpora`"):
        stream_weights([a], corpus_weights={"other": 1.0})


def test_same_seed_same_batches(tokenizer, quickstart_records):
    def first(seed):
        ds = make_dataset([quickstart_records], tokenizer, batch_size=16, max_tokens=48, seed=seed, features=[F.RawText()])
        return _targets(ds, 2)

    assert first(3) == first(3)
    assert first(3) != first(4)


def test_file_glob_corpus(tokenizer, tmp_path):
    _corpus(tmp_path, "g", {"de": 30})
    ds = make_dataset(str(tmp_path / "g" / "*.tfrecord-*"), tokenizer, batch_size=10, max_tokens=48, repeat=False)
    assert sum(1 for _ in ds) == 3


def test_errors_name_the_problem(tokenizer, tmp_path):
    with pytest.raises(CorpusError, match="missing.manifest.json"):
        make_dataset([str(tmp_path / "missing.manifest.json")], tokenizer, batch_size=2, max_tokens=48)
    with pytest.raises(CorpusError, match="no data"):
        make_dataset([str(tmp_path / "nothing-*")], tokenizer, batch_size=2, max_tokens=48)
    with pytest.raises(ValueError, match="max_tokens=64 exceeds"):
        make_dataset([str(tmp_path / "x")], tokenizer, batch_size=2, max_tokens=64)


def test_input_sharding_splits_files(tokenizer, tmp_path):
    corpus = _corpus(tmp_path, "s", {"de": 40}, num_shards=4)
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id)
        ds = make_dataset(corpus, tokenizer, batch_size=5, max_tokens=48, repeat=False, features=[F.RawText()], input_context=context)
        seen.append(set(_targets(ds, 100)))
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == {f"de{i}" for i in range(40)}


def test_distributed_per_replica_batches(tokenizer, quickstart_records, two_device_strategy):
    with pytest.raises(ValueError, match="not divisible"):
        make_distributed_dataset(two_device_strategy, 7, corpora=[quickstart_records], tokenizer=tokenizer, max_tokens=48)
    ds = make_distributed_dataset(two_device_strategy, 8, corpora=[quickstart_records], tokenizer=tokenizer, max_tokens=48)
    assert len(ds.source_files) == 6 and all(".tfrecord-" in path for path in ds.source_files)
    batch = next(iter(ds))
    local = two_device_strategy.experimental_local_results(batch["src"]["token_ids"])
    assert [t.shape[0] for t in local] == [4, 4]


def test_input_sharding_by_record_when_files_are_few(tokenizer, tmp_path):
    corpus = _corpus(tmp_path, "r", {"de": 30}, num_shards=1)
    seen = []
    for pipeline_id in range(3):
        context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=pipeline_id)
        ds = make_dataset(corpus, tokenizer, batch_size=5, max_tokens=48, repeat=False, features=[F.RawText()],
                          input_context=context, drop_remainder=False)
        seen.append(_targets(ds, 100))
    assert [len(s) for s in seen] == [10, 10, 10]
    assert sorted(sum(seen, [])) == sorted(f"de{i}" for i in range(30))


def test_language_ids_index_the_corpus_languages_sorted_or_the_given_list(tokenizer, tmp_path):
    corpus = _corpus(tmp_path, "c", {"de": 30, "fr": 30})
    ds = make_dataset(corpus, tokenizer, batch_size=16, max_tokens=48, features=[F.RawText(), F.LanguageIds()])
    batch = next(iter(ds))
    order = ["de", "en", "fr"]
    assert set(batch["src_lang_id"].numpy()) == {order.index("en")}
    expected = [order.index(t.decode()[:2]) for t in batch["tgt_text"].numpy()]
    assert list(batch["tgt_lang_id"].numpy()) == expected and set(expected) == {0, 2}
    # A given list sets the order (a table's rows); no <2xx> token is needed: "cs" has none in this vocabulary.
    given = _corpus(tmp_path, "g", {"cs": 10})
    batch = next(iter(make_dataset(given, tokenizer, batch_size=4, max_tokens=48,
                                   features=[F.LanguageIds(["cs", "en"], max_languages=2)])))
    assert set(batch["src_lang_id"].numpy()) == {1} and set(batch["tgt_lang_id"].numpy()) == {0}


def test_more_languages_than_table_rows_are_named(tokenizer, tmp_path):
    corpus = _corpus(tmp_path, "c", {"de": 10, "fr": 10})
    with pytest.raises(CorpusError, match=r"3 languages \(de en fr\) but a table of 2 rows; raise max_languages"):
        make_dataset(corpus, tokenizer, batch_size=4, max_tokens=48, features=[F.LanguageIds(max_languages=2)])


def test_an_unknown_tag_in_the_records_is_named(tokenizer, tmp_path):
    _corpus(tmp_path, "c", {"fr": 10})
    shards = str(tmp_path / "c" / "c.en-fr.tfrecord-*")
    ds = make_dataset(shards, tokenizer, batch_size=4, max_tokens=48, features=[F.LanguageIds(["en", "de"])])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)Unknown language tag.*fr.*knows en de"):
        next(iter(ds))


def test_hard_negatives_come_as_a_third_token_axis(tokenizer, tmp_path):
    rows = [(f"source {i}", f"target {i}", f"wrong {i}", "another wrong one here") for i in range(12)]
    write_tfrecords([("en", "de", rows)], str(tmp_path / "h"), "h", 1, verbose=False)
    ds = make_dataset(str(tmp_path / "h" / "h.manifest.json"), tokenizer, batch_size=4, max_tokens=48,
                      features=[F.HardNegatives(2), F.RawText()], shuffle_buffer=0)
    batch = next(iter(ds))
    ids, mask = batch["hard_negatives"]["token_ids"].numpy(), batch["hard_negatives"]["padding_mask"].numpy()
    assert ids.shape[:2] == (4, 2) and ids.shape == mask.shape
    first = batch["tgt_text"].numpy()[0].decode().split()[-1]
    expected = tokenizer.tokenize([f"wrong {first}", "another wrong one here"]).to_list()
    for row, tokens in enumerate(expected):
        assert ids[0, row, : len(tokens)].tolist() == tokens
        assert mask[0, row].sum() == len(tokens) and (ids[0, row][~mask[0, row]] == tokenizer.pad_id).all()
    with pytest.raises(CorpusError, match=r"h\.en-de\.tfrecord-00000-of-00001 has 2 hard negatives per pair but "
                                          r"num_hard_negatives=3"):
        make_dataset(str(tmp_path / "h" / "h.manifest.json"), tokenizer, batch_size=4, max_tokens=48,
                     features=[F.HardNegatives(3)])


def test_nli_batches_ride_along_for_multitask_objectives(tokenizer, quickstart_records, tmp_path,
                                                         two_device_strategy):
    import json

    rows = [{"sentence1": f"A man plays {i}.", "sentence2": "Someone plays.", "gold_label": "entailment"}
            for i in range(40)]
    (tmp_path / "nli.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(CorpusError, match="DualMomentumContrast.nli_path"):
        F.NliBatch(None, 6)
    options = dict(tokenizer=tokenizer, corpora=[quickstart_records], max_tokens=48,
                   features=[F.NliBatch(str(tmp_path / "nli.jsonl"), 6)])
    batch = next(iter(make_distributed_dataset(two_device_strategy, 8, **options)))
    for replica in two_device_strategy.experimental_local_results(batch["nli"]["target"]):
        assert replica.shape == (3,) and set(replica.numpy()) == {0.0}
    for replica in two_device_strategy.experimental_local_results(batch["src"]["token_ids"]):
        assert replica.shape[0] == 4


def test_pretokenized_records_give_the_same_batches(tokenizer, tmp_path):
    rows = [(f"Der Hund {i} läuft über die Wiese.", f"The dog {i} runs" + " fast" * (i % 7)) for i in range(60)]
    write_tfrecords([("de", "en", rows)], str(tmp_path / "p"), "p", 2, verbose=False, tokenizer=tokenizer)
    manifest = str(tmp_path / "p" / "p.manifest.json")
    options = dict(batch_size=8, max_tokens=48, features=[F.RawText()], seed=5, repeat=False)
    text = list(make_dataset(manifest, tokenizer, **options))
    ids = list(make_dataset(manifest, tokenizer, pretokenized=True, **options))
    assert len(text) == len(ids) > 2
    for a, b in zip(text, ids):
        assert a["src_text"].numpy().tolist() == b["src_text"].numpy().tolist()
        for side in ("src", "tgt"):
            for key in ("token_ids", "padding_mask"):
                assert a[side][key].numpy().tolist() == b[side][key].numpy().tolist()


def test_pretokenized_needs_records_of_the_same_tokenizer(tokenizer, tmp_path):
    from tf_msemb.text.tokenizers import SentencePieceTokenizer

    corpus = _corpus(tmp_path, "plain", {"de": 10})
    with pytest.raises(CorpusError, match=r"plain\.manifest\.json has no token ids; .*--tokenizer"):
        make_dataset(corpus, tokenizer, batch_size=4, max_tokens=48, pretokenized=True)
    other = SentencePieceTokenizer(tokenizer.model_file, add_eos=False)
    rows = [("a b", "c d")] * 10
    write_tfrecords([("en", "de", rows)], str(tmp_path / "o"), "o", 1, verbose=False, tokenizer=other)
    with pytest.raises(CorpusError, match=r"ids of another tokenizer \(SentencePieceTokenizer [0-9a-f]{16}\)"):
        make_dataset(str(tmp_path / "o" / "o.manifest.json"), tokenizer, batch_size=4, max_tokens=48,
                     pretokenized=True)


def test_length_buckets_keep_every_pair_and_cut_padding(tokenizer, tmp_path):
    rows = [(f"kurz {i}", f"short {i}" + " and much longer" * (i % 5)) for i in range(200)]
    write_tfrecords([("de", "en", rows)], str(tmp_path / "b"), "b", 2, verbose=False)
    manifest = str(tmp_path / "b" / "b.manifest.json")
    options = dict(batch_size=10, max_tokens=48, features=[F.RawText()], repeat=False, drop_remainder=False)

    def stats(dataset):
        texts, padding = [], 0
        for batch in dataset:
            texts += batch["tgt_text"].numpy().tolist()
            padding += int((~batch["tgt"]["padding_mask"].numpy()).sum())
        return sorted(texts), padding

    plain_texts, plain_padding = stats(make_dataset(manifest, tokenizer, **options))
    bucket_texts, bucket_padding = stats(make_dataset(manifest, tokenizer, bucket_boundaries=list(range(4, 30, 2)), **options))
    assert bucket_texts == plain_texts and len(plain_texts) == 200
    assert bucket_padding < 0.3 * plain_padding
