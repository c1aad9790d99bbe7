import tensorflow as tf

from tf_msemb.text.normalize import DASHES
from tf_msemb.text.normalize import DOUBLE_QUOTES
from tf_msemb.text.normalize import HYPHENS
from tf_msemb.text.normalize import SINGLE_QUOTES
from tf_msemb.text.normalize import normalize_text


def norm(texts):
    return [t.decode("utf-8") for t in normalize_text(tf.constant(texts)).numpy()]


def test_each_class_collapses_to_one_symbol():
    assert set(norm(list(DOUBLE_QUOTES) + ["\uff02"])) == {'"'}
    assert set(norm(list(SINGLE_QUOTES) + ["\uff07"])) == {"'"}
    assert set(norm(list(HYPHENS) + ["-"])) == {"-"}
    assert set(norm(list(DASHES))) == {"\u2014"}


def test_nfkc_and_whitespace():
    assert norm(["\uff21\uff22\uff23  \u00bdx\t\ty ", "ﬁne", "   "]) == ["ABC 1⁄2x y", "fine", ""]


def test_sentence_level():
    assert norm(["„Das ist’s“ – sagte er — gut‐so «oui» ‘yes’"]) == [
        "\"Das ist's\" \u2014 sagte er \u2014 gut-so \"oui\" 'yes'"
    ]


def test_invalid_utf8_is_repaired_not_fatal():
    out = normalize_text(tf.constant([b"ok \xff\xfe end"])).numpy()[0].decode("utf-8")
    assert out == "ok \ufffd\ufffd end"


def test_keeps_shape():
    assert normalize_text(tf.constant([["a", "b"], ["c", "d"]])).shape == (2, 2)
