"""The Keras tokenizer and encoder behind an export, rebuilt from its metadata and weights.

An export holds no Keras object (`saved_model._Parts`), but its metadata
(`tf_msemb_export.json`) records the tokenizer's class and config and the
encoder's serialized config, its `assets/` the tokenizer's file, and its
checkpoint the encoder's variables in the order of `encoder.variables`
(`EmbeddingModule.variables`). `keras_parts` rebuilds both from these, so
an export can be written in another format (`export.st_directory`) with the
weights it serves.
"""

import collections
import json
import os

import keras
import tensorflow as tf

from tf_msemb.cpus import MachineError
from tf_msemb.export.model_card import METADATA_FILE
from tf_msemb.export.saved_model import backing_variables
from tf_msemb.export.saved_model import check_loadable
from tf_msemb.export.saved_model import resolve_export
from tf_msemb.models import heads  # noqa: F401  (registers the classes a metadata's encoder may name)
from tf_msemb.models import hf_checkpoint  # noqa: F401
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.text import hf_tokenizers
from tf_msemb.text import tokenizer_json
from tf_msemb.text import tokenizers

# Tokenizer class -> (class, the config key naming its one file, kept in the export's assets/).
TOKENIZERS = {
    "SentencePieceTokenizer": (tokenizers.SentencePieceTokenizer, "model_file"),
    "WordPieceTokenizer": (tokenizers.WordPieceTokenizer, "vocabulary_file"),
    "FairseqSentencePieceTokenizer": (hf_tokenizers.FairseqSentencePieceTokenizer, "model_file"),
    "JsonWordPieceTokenizer": (tokenizer_json.JsonWordPieceTokenizer, "tokenizer_file"),
    "JsonUnigramTokenizer": (tokenizer_json.JsonUnigramTokenizer, "tokenizer_file"),
}


def read_metadata(path):
    """`tf_msemb_export.json` of the export at `path`."""
    metadata_file = os.path.join(path, METADATA_FILE)
    if not os.path.exists(metadata_file):
        raise FileNotFoundError(f"{metadata_file} not found: the directory is no tf_msemb export.")
    with open(metadata_file, encoding="utf-8") as f:
        return json.load(f)


def rebuild_tokenizer(path, record):
    """The tokenizer of `record` (the metadata's `tokenizer`), reading its file from `path/assets`."""
    name = record.get("class")
    if name not in TOKENIZERS:
        raise ValueError(f"{os.path.join(path, METADATA_FILE)} names tokenizer {name}; rebuilt from an export: "
                         f"{', '.join(TOKENIZERS)} (a tokenizer of two files keeps only one in assets/).")
    cls, file_key = TOKENIZERS[name]
    config = dict(record["config"])
    for key in ("name", "trainable", "dtype"):
        config.pop(key, None)
    asset = os.path.join(path, "assets", record.get("asset") or "")
    if not os.path.isfile(asset):
        raise FileNotFoundError(f"{asset} not found: the export's tokenizer file.")
    config[file_key] = asset
    return cls(**config)


def keras_parts(path):
    """`(tokenizer, encoder, metadata)` of the export at `path` (or a training run's `export/final`).

    The encoder's weights are the export's own; its outputs are those of the
    Keras model the export was written from (float32, before any int8 or
    bfloat16 inference the export runs, and before its `output_dim` cut).
    """
    path = resolve_export(path)
    metadata = read_metadata(path)
    tokenizer = rebuild_tokenizer(path, metadata["tokenizer"])
    encoder = keras.saving.deserialize_keras_object(metadata["encoder"])
    ensure_built(encoder)
    encoder(tokenizer(tf.constant([""])))  # creates what the export's first call created (dropout seeds)
    variables = backing_variables(encoder.variables)
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    shapes = reader.get_variable_to_shape_map()
    keys = [f"variables/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(len(variables))]
    saved = sum(1 for key in shapes if key.startswith("variables/") and key.count("/") == 3)
    if saved != len(variables):
        raise ValueError(f"{path} holds {saved} encoder variables; its metadata's encoder has {len(variables)}.")
    for variable, key in zip(variables, keys):
        if tuple(shapes[key]) != tuple(variable.shape):
            raise ValueError(f"{path}: variable {variable.name} is {tuple(shapes[key])} in the export, "
                             f"{tuple(variable.shape)} in its metadata's encoder.")
        variable.assign(reader.get_tensor(key))
    return tokenizer, encoder, metadata


# Texts the rebuilt model is checked on against the export itself: scripts, accents, full-width, empty, long.
PROBE_SENTENCES = (
    "A man is playing a guitar.", "Élève, déjà, naïve: Größe und Übung in Zürich.", "Привет, как дела?",
    "東京は日本の首都です。", "مرحبا بالعالم", "ＦＵＬＬ－ＷＩＤＴＨ　ｔｅｘｔ １２３", "", "long " * 300,
)


def rebuild_cosine(path, tokenizer, encoder, output_dim=None, sentences=PROBE_SENTENCES):
    """The smallest cosine between the export's vectors and those of its rebuilt Keras model over `sentences`."""
    model = tf.saved_model.load(resolve_export(path))
    exported = model(tf.constant(list(sentences))).numpy()
    rebuilt = encoder(tokenizer(tf.constant(list(sentences))))
    rebuilt = l2_normalize(rebuilt[:, :output_dim] if output_dim else rebuilt).numpy()
    return float((exported * rebuilt).sum(axis=1).min())


# A float32 export and its rebuilt Keras model compute the same function: anything below this is a wrong rebuild.
MIN_REBUILD_COSINE = 0.9999
CheckedParts = collections.namedtuple("CheckedParts", "path tokenizer encoder metadata output_dim check")


def checked_parts(model):
    """`CheckedParts` of an export or a training run's `model_dir` (its `export/final`), for writing it elsewhere.

    The rebuilt Keras model is checked against the export on `PROBE_SENTENCES`
    (`check`: the line saying how it went); a float32 export below
    `MIN_REBUILD_COSINE` raises. `output_dim` is the export's cut, or None.
    An export this machine cannot load (`MachineError`) is written from its
    weights unchecked.
    """
    path = resolve_export(model)
    tokenizer, encoder, metadata = keras_parts(path)
    output_dim = metadata.get("embedding_dim") if metadata.get("embedding_dim") != metadata.get(
        "full_embedding_dim") else None
    precision = metadata.get("compute_precision", "float32")
    try:
        check_loadable(path)
    except MachineError as e:
        check = f"Not compared with the export ({e}); written from its weights."
    else:
        cosine = rebuild_cosine(path, tokenizer, encoder, output_dim)
        check = f"The rebuilt model against the export ({precision}): min cosine {cosine:.6f} over the probe sentences."
        if precision == "float32" and cosine < MIN_REBUILD_COSINE:
            raise ValueError(f"{path}: the model rebuilt from its metadata gives other vectors than the export "
                             f"(cosine {cosine:.6f} < {MIN_REBUILD_COSINE}); not written.")
    return CheckedParts(path, tokenizer, encoder, metadata, output_dim, check)
