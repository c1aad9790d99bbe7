"""One-line messages for errors a user can fix, from real TensorFlow errors; bugs keep their traceback."""

import pytest
import tensorflow as tf

from tf_msemb.data.features import LanguageIds
from tf_msemb.data.records import make_example
from tf_msemb.text_files import CorpusError
from tf_msemb.training.checkpointing import CheckpointError
from tf_msemb.training.errors import NonFiniteLossError
from tf_msemb.training.errors import explain_data_error
from tf_msemb.training.errors import one_line
from tf_msemb.training.strategy import StrategyError


def raised(fn, *args):
    """The `tf.errors.OpError` that `fn(*args)` raises."""
    with pytest.raises(tf.errors.OpError) as error:
        fn(*args)
    return error.value


@tf.function
def positive(x):
    check = tf.debugging.Assert(x > 0, ["Must be positive, got", x])
    with tf.control_dependencies([check]):
        return tf.identity(x)


def read_all(dataset):
    for _ in dataset:
        pass


@tf.function
def to_number(text):
    return tf.strings.to_number(text)


def test_an_unknown_language_tag_in_the_pipeline_is_named():
    """The message `LanguageIds` asserts in the pipeline, read back as one line."""
    languages = LanguageIds(["de", "en"])
    languages.prepare(tokenizer=None, corpora=[])
    records = tf.data.Dataset.from_tensor_slices({"src_lang": ["en", "xx"], "tgt_lang": ["de", "de"]}).batch(2)
    error = raised(read_all, records.map(lambda r: languages.parse(r, tokenizer=None)))
    assert explain_data_error(error, [], 4) == (
        "Unknown language tag 'xx' in the corpus; the run knows de en "
        "(add it to EMS.languages, or leave that unset to take the manifests' tags, or drop that pair)."
    )


def test_a_missing_record_field_is_named():
    features = {"src": tf.io.FixedLenFeature([], tf.string), "teacher": tf.io.FixedLenFeature([3], tf.float32)}
    error = raised(tf.io.parse_single_example, make_example("a", "b", "en", "de"), features)
    assert explain_data_error(error, [], 7) == "Input records lack the field 'teacher' (step 7)."


def test_a_corrupt_shard_is_found_among_the_sources(tmp_path):
    paths = [str(tmp_path / f"c.tfrecord-{i}") for i in range(2)]
    for path in paths:
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(50):
                writer.write(make_example(f"house {i}", f"Haus {i}", "en", "de"))
    data = bytearray((tmp_path / "c.tfrecord-1").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "c.tfrecord-1").write_bytes(bytes(data))
    error = raised(read_all, tf.data.TFRecordDataset(paths))
    assert isinstance(error, tf.errors.DataLossError)
    assert explain_data_error(error, paths, 3).startswith(f"Corrupt TFRecord shard {paths[1]}: corrupted record at ")
    # When no listed shard reads back corrupt, the step and TensorFlow's reason are given.
    assert explain_data_error(error, paths[:1], 3).startswith("Corrupt input data at step 3: corrupted record at ")


def test_other_bad_input_gives_the_op_message():
    error = raised(read_all, tf.data.Dataset.from_tensor_slices(["12", "abc"]).map(tf.strings.to_number))
    assert explain_data_error(error, [], 5) == (
        "Bad input at step 5: StringToNumberOp could not correctly convert string: abc"
    )


def test_op_errors_in_a_tf_function_give_the_op_message_not_the_stack():
    assert one_line(raised(to_number, tf.constant("abc"))) == "StringToNumberOp could not correctly convert string: abc"
    assert one_line(raised(positive, tf.constant(-2))) == "[Must be positive, got] [-2]"


@pytest.mark.parametrize(
    "error",
    [
        CorpusError("corpus.txt is empty.\nmore detail"),
        ValueError("corpus.txt is empty.\nmore detail"),
        StrategyError("corpus.txt is empty.\nmore detail"),
        CheckpointError("corpus.txt is empty.\nmore detail"),
        NonFiniteLossError("corpus.txt is empty.\nmore detail"),
        FileNotFoundError("corpus.txt is empty.\nmore detail"),
    ],
)
def test_errors_the_user_can_fix_become_their_first_line(error):
    assert one_line(error) == "corpus.txt is empty."


@pytest.mark.parametrize("error", [RuntimeError("x"), KeyError("x"), TypeError("x"), AttributeError("x")])
def test_bugs_keep_their_traceback(error):
    assert one_line(error) is None
