"""An encoder as one LiteRT (TFLite) file: raw strings in, unit vectors out, tokenization inside.

The graph is the tokenizer in TFLite's ops (`text.tflite_tokenizers`), the
Keras encoder, the Matryoshka cut and the final L2 normalization; its one
input is a 1-D string tensor (any batch: `resize_tensor_input`), its one
output float32 `[batch, d]`. Converted with TFLite's builtins plus
tensorflow-text's custom ops (no Flex: neither ai-edge-litert nor MediaPipe
ships it). Two op spellings, one per runtime:

- `target="litert"`: tensorflow-text's names, for `ai_edge_litert`'s
  interpreter with tensorflow-text's TFLite registrar (`interpreter`);
- `target="mediapipe"`: the SentencePiece op under the name MediaPipe's
  `TextEmbedder` resolves (`TFSentencepieceTokenizeOp`), the rest equal;
  SentencePiece models only (MediaPipe has no kernels for WordPiece's ops).

`quantization="dynamic_int8"`: TFLite's dynamic-range quantization (int8
weights, activations quantized per call), about a quarter of the size.
"""

import numpy as np
import tensorflow as tf

from tf_msemb.models.encoder import l2_normalize
from tf_msemb.text.tflite_tokenizers import tflite_tokenizer

TARGETS = ("litert", "mediapipe")
QUANTIZATIONS = ("none", "dynamic_int8")
# tensorflow-text's SentencePiece op as it converts, and the name MediaPipe's TextEmbedder registers it under.
SENTENCEPIECE_OP = "TFText>FastSentencepieceTokenize"
MEDIAPIPE_SENTENCEPIECE_OP = "TFSentencepieceTokenizeOp"
# The custom ops MediaPipe's TextEmbedder resolves.
MEDIAPIPE_OPS = ("RaggedTensorToTensor", MEDIAPIPE_SENTENCEPIECE_OP)


class LiteRTEmbedder(tf.Module):
    """Tokenizer (TFLite ops) + encoder + cut + L2 normalization, the module the converter reads.

    `weights` holds the encoder's variables' values: the converter keeps a
    Keras 3 model's weights only where the module tracks them itself.
    """

    def __init__(self, tokenizer, encoder, output_dim=None):
        super().__init__()
        self.tokenizer = tflite_tokenizer(tokenizer)
        self.encoder = encoder
        self.weights = [v.value for v in encoder.weights]
        self.output_dim = output_dim

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def embed(self, texts):
        vectors = self.encoder(self.tokenizer(texts), training=False)
        return l2_normalize(vectors[:, : self.output_dim] if self.output_dim else vectors)


def convert(tokenizer, encoder, output_dim=None, quantization="none", target="litert"):
    """The `.tflite` file's bytes of `tokenizer` + `encoder` (see the module's docstring for the options)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization {quantization!r}: one of {', '.join(QUANTIZATIONS)}.")
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: one of {', '.join(TARGETS)}.")
    module = LiteRTEmbedder(tokenizer, encoder, output_dim)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.embed.get_concrete_function()], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = True
    if quantization == "dynamic_int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    content = converter.convert()
    return for_mediapipe(content) if target == "mediapipe" else content


LITERT_MISSING = "LiteRT files need ai-edge-litert: pip install 'tf_msemb[litert]'."


def _flatbuffer_utils():
    try:
        from ai_edge_litert.tools import flatbuffer_utils
    except ImportError as e:
        raise ImportError(LITERT_MISSING) from e
    return flatbuffer_utils


def _custom_op_names(model):
    names = (code.customCode for code in model.operatorCodes if code.customCode)
    return sorted({name.decode() if isinstance(name, bytes) else name for name in names})


def custom_ops(content):
    """The custom op names a `.tflite` file's bytes call."""
    return _custom_op_names(_flatbuffer_utils().convert_bytearray_to_object(bytearray(content)))


def for_mediapipe(content):
    """The file's bytes with the SentencePiece op renamed for MediaPipe's `TextEmbedder`.

    A file calling other ops MediaPipe lacks (WordPiece's) raises instead.
    """
    flatbuffer_utils = _flatbuffer_utils()
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
    flatbuffer_utils.rename_custom_ops(model, {SENTENCEPIECE_OP: MEDIAPIPE_SENTENCEPIECE_OP})
    missing = sorted(set(_custom_op_names(model)) - set(MEDIAPIPE_OPS))
    if missing:
        raise ValueError(f"MediaPipe's TextEmbedder has no kernels for {', '.join(missing)} (its one in-graph "
                         "tokenizer is SentencePiece); write target=litert and load it with ai_edge_litert.")
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def interpreter(model, num_threads=1):
    """`ai_edge_litert`'s interpreter on a `target="litert"` file (path or bytes), tensorflow-text's ops registered.

    `num_threads=None`: the interpreter's default.
    """
    import tensorflow_text as tf_text

    try:
        from ai_edge_litert import interpreter as litert_interpreter
    except ImportError as e:
        raise ImportError(LITERT_MISSING) from e
    source = {"model_content": model} if isinstance(model, (bytes, bytearray)) else {"model_path": str(model)}
    runner = litert_interpreter.InterpreterWithCustomOps(
        **source, num_threads=num_threads, custom_op_registerers=tf_text.tflite_registrar.SELECT_TFTEXT_OPS)
    runner.allocate_tensors()  # for a first batch of the file's own shape (one text), which `encode` does not resize
    return runner


def encode(runner, texts):
    """float32 `[len(texts), d]` from an `interpreter` on a list of strings (or UTF-8 bytes)."""
    (inp,), (out,) = runner.get_input_details(), runner.get_output_details()
    if tuple(inp["shape"]) != (len(texts),):
        runner.resize_tensor_input(inp["index"], [len(texts)])
        runner.allocate_tensors()
    runner.set_tensor(inp["index"], np.array(texts, dtype=object))
    runner.invoke()
    return runner.get_tensor(out["index"])


class LiteRTModel:
    """A `target="litert"` file as a loaded export is used: strings (list or string tensor) -> unit vectors `[n, d]`.

    `num_threads`: the interpreter's threads (None: its default).
    """

    def __init__(self, path, num_threads=None):
        self.runner = interpreter(path, num_threads)

    def __call__(self, texts):
        texts = texts.numpy().tolist() if isinstance(texts, tf.Tensor) else list(texts)
        return encode(self.runner, texts)


# A float32 file computes the Keras model's function: anything below this is a wrong graph, not rounding.
MIN_FLOAT32_COSINE = 0.9999


def keras_vectors(tokenizer, encoder, sentences, output_dim=None):
    """The unit vectors the file should give: the Keras model's, cut to `output_dim`."""
    vectors = encoder(tokenizer(tf.constant(list(sentences))), training=False)
    return l2_normalize(vectors[:, :output_dim] if output_dim else vectors).numpy()


def litert_check(content, expected, sentences):
    """The smallest cosine between a `target="litert"` file's vectors and `expected` (unit rows) over `sentences`."""
    return float((encode(interpreter(content), list(sentences)) * expected).sum(axis=1).min())


def write_litert(tokenizer, encoder, path, expected, sentences, output_dim=None, quantization="none",
                 target="litert"):
    """Converts, checks the file against `expected` (unit vectors of `sentences`) and writes it; returns the cosine.

    A float32 file below `MIN_FLOAT32_COSINE` raises instead of being written.
    """
    content = convert(tokenizer, encoder, output_dim, quantization)
    cosine = litert_check(content, expected, sentences)
    if quantization == "none" and cosine < MIN_FLOAT32_COSINE:
        raise ValueError(f"the LiteRT graph gives other vectors than the model (cosine {cosine:.6f} < "
                         f"{MIN_FLOAT32_COSINE}); {path} not written.")
    with open(path, "wb") as f:
        f.write(for_mediapipe(content) if target == "mediapipe" else content)
    return cosine
