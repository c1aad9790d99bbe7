"""Writing a SavedModel that maps raw strings to unit-length embeddings.

The result follows the TF-Hub conventions of mUSE:

    model = tf.saved_model.load(path)             # after `import tensorflow_text`
    model(tf.constant(["Hallo Welt", "hello world"]))          # [2, dim] float32
    model.signatures["serving_default"](inputs=...)["outputs"]  # TF Serving

It also exposes `variables`, `trainable_variables` and `regularization_losses`
(the reusable SavedModel API), so `hub.KerasLayer` can wrap it. Normalization
and tokenization run inside, pinned to the CPU; the tokenizer's model file is
copied into `assets/`.
"""

import datetime
import json
import os
import shutil

import gin
import keras
import tensorflow as tf
from absl import logging
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

import tf_msemb
from tf_msemb.cpus import PLATFORMS
from tf_msemb.cpus import MachineError
from tf_msemb.cpus import require
from tf_msemb.cpus import this_cpu
from tf_msemb.export.cpu_check import CpuCheck
from tf_msemb.export.cpu_check import bfloat16_requirements
from tf_msemb.export.cpu_check import int8_requirements
from tf_msemb.inference.int8_export import int8_packed
from tf_msemb.export.model_card import METADATA_FILE
from tf_msemb.export.model_card import write_model_card
from tf_msemb.export.serving import INPUT_KEY
from tf_msemb.export.serving import OUTPUT_KEY
from tf_msemb.export.serving import SIGNATURE
from tf_msemb.export.serving import WARMUP_FILE
from tf_msemb.export.serving import write_warmup_requests
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.inference.packed import INFERENCE_STREAMS
from tf_msemb.inference.packed import PackedEncoder
from tf_msemb.inference.packed import packed_support
from tf_msemb.models.precision import with_precision
from tf_msemb.provenance import describe_file
from tf_msemb.provenance import portable_config
from tf_msemb.provenance import portable_text
from tf_msemb.provenance import portable_value

OPERATIVE_CONFIG = "operative_config.gin"
# The copied gin config names no path of the machine that wrote it.
OPERATIVE_CONFIG_HEADER = ("# The run's full gin config; absolute paths of the machine that trained it are replaced by "
                           "their base names\n# (tf_msemb.provenance.portable_text): bind them to your own files to "
                           "rerun it.\n")
_STRINGS = tf.TensorSpec([None], tf.string, name=INPUT_KEY)


class _Parts:
    """The Keras layers and modules an `EmbeddingModule` runs, held where saving does not track them.

    A Keras 3 variable wraps a `tf.Variable`. Saved through a tracked Keras
    object, it writes a second variable into the exported graph (its
    `_export_to_saved_model_graph` copies the first) and the MetaGraph's saver
    restores only that copy, while the traced functions read the first:
    `tf.saved_model.load` rebinds captures by object, but TF Serving's Session
    loader runs the restore op and then fails with "Could not find variable".
    The module therefore tracks the backing `tf.Variable`s the functions read,
    as Keras' own `ExportArchive` does, and none of the Keras objects.
    """

    def __init__(self, tokenizer, encoder, packed):
        self.tokenizer, self.encoder, self.packed = tokenizer, encoder, packed


def backing_variables(variables):
    """The `tf.Variable`s behind Keras variables (plain `tf.Variable`s stay), without repeats."""
    backing = {}
    for variable in variables:
        value = variable.value if isinstance(variable, keras.Variable) else variable
        if not isinstance(value, tf.Variable):
            raise TypeError(f"Variable {variable.name} is not backed by a tf.Variable: {type(value).__name__}.")
        backing.setdefault(id(value), value)
    return list(backing.values())


def _resources(*roots):
    """The lookup tables and other TF resources reachable from `roots` (created outside the traced functions)."""
    found = {}
    for root in roots:
        for node in tf.train.TrackableView(root).descendants():
            if isinstance(node, tf.saved_model.experimental.TrackableResource):
                found.setdefault(id(node), node)
    return list(found.values())


class EmbeddingModule(tf.Module):
    """Tokenizer + encoder as one trackable object.

    Args:
        tokenizer: a `SubwordTokenizer` layer.
        encoder: tokens -> `[b, d]` (a `SentenceEncoder` or a teacher).
        sub_batch_size: sort each call's sentences by token count and encode
            them in sub-batches of this many, each padded only to its own
            longest sentence; results come back in the caller's order. Less
            padding, same vectors (to float rounding). None or 0: one padded batch.
        packed: a `PackedEncoder` of `encoder` for inference (`training=False`
            and the serving signature), or None to run `encoder` there too.
            Training calls always run `encoder` (dropout), on one padded batch.
        precision: the compute precision `packed` runs in (`inference_module`'s
            `precision`); below float32 the packed path's gradient is
            straight-through (`_packed_embed`).
        cpu_requirements: `export.cpu_check.CpuRequirement`s the graph's
            kernels need: checked by a `CpuCheck` when the export loads.
        output_dim: outputs keep the encoder's first `output_dim` dimensions,
            re-normalized (a Matryoshka-trained encoder's nested vectors);
            None: all of them.

    What a SavedModel of it holds (see `_Parts` for why no Keras object):
    `variables` and `trainable_variables`, the `tf.Variable`s behind the
    encoder's (each saved once, and the ones the functions read, so
    fine-tuning the restored lists moves the outputs);
    `inference_variables`, any other variable the functions read (a packed
    export's cast or quantized matmul weights);
    `resources`, the tokenizer's lookup tables (and the `CpuCheck`, first); the tokenizer's file as an asset.
    """

    # Plain attributes rather than tf.Module's computed properties, so they
    # are saved and visible after `tf.saved_model.load`.
    variables = None
    trainable_variables = None

    def __init__(self, tokenizer, encoder, sub_batch_size=32, packed=None, precision="float32", cpu_requirements=(),
                 output_dim=None, name=None):
        super().__init__(name=name)
        if output_dim is not None and not 0 < output_dim <= encoder.output_dim:
            raise ValueError(f"output_dim = {output_dim} must be within the encoder's {encoder.output_dim} "
                             "dimensions.")
        self.output_dim = output_dim
        self.cpu_requirements = list(cpu_requirements)
        self.precision = precision
        self._parts = _Parts(tokenizer, encoder, packed)
        self.sub_batch_size = sub_batch_size
        # One eager call creates any state still missing (weights, dropout
        # seeds) outside the traced functions, where saving can reach it.
        encoder(tokenizer(tf.constant([""])))
        self.variables = backing_variables(encoder.variables)
        self.trainable_variables = backing_variables(encoder.trainable_variables)
        self.regularization_losses = []
        listed = {id(variable) for variable in self.variables}
        read = backing_variables(variable for function in (self.__call__, self.serve)
                        for variable in function.get_concrete_function().variables)
        self.inference_variables = [variable for variable in read if id(variable) not in listed]
        check = [CpuCheck(self.cpu_requirements, precision)] if self.cpu_requirements else []
        self.resources = check + _resources(tokenizer, encoder, *([packed] if packed is not None else []))
        self.tokenizer_asset = tf.saved_model.Asset(tokenizer.asset_file) if tokenizer.asset_file else None

    @property
    def tokenizer(self):
        return self._parts.tokenizer

    @property
    def encoder(self):
        return self._parts.encoder

    @property
    def packed(self):
        return self._parts.packed

    def _encode(self, ids, training):
        return tf.cast(self.encoder(self.tokenizer.pad(ids), training=training), tf.float32)

    def _encode_sorted(self, ids, training):
        """Encodes length-sorted sub-batches and puts the vectors back in input order."""
        order = tf.argsort(ids.row_lengths(), stable=True)
        ids = tf.gather(ids, order)
        size = self.sub_batch_size
        count = (ids.nrows(out_type=tf.int32) + size - 1) // size
        parts = tf.TensorArray(tf.float32, size=count, infer_shape=False,
                               element_shape=tf.TensorShape([None, self.encoder.output_dim]))

        def body(i, parts):
            return i + 1, parts.write(i, self._encode(ids[i * size:(i + 1) * size], training))

        _, parts = tf.while_loop(lambda i, _: i < count, body, [tf.constant(0), parts])
        return tf.gather(parts.concat(), tf.math.invert_permutation(order))

    def _unit(self, vectors):
        """Unit rows of `vectors` (their first `output_dim` dimensions when set)."""
        return l2_normalize(vectors if self.output_dim is None else vectors[:, :self.output_dim])

    def _embed(self, inputs, training, differentiable=True):
        with tf.device("/cpu:0"):
            ids = self.tokenizer.tokenize(inputs)
        if self.packed is not None and not training:
            return self._packed_embed(ids, differentiable)
        if self.sub_batch_size and not training:
            return self._unit(self._encode_sorted(ids, training))
        return self._unit(self._encode(ids, training))

    def _packed_embed(self, ids, differentiable):
        """The packed forward; with `differentiable` below float32, its gradient is the Keras forward's (straight-through).

        A bfloat16 export's matmuls read bfloat16 copies and an int8 one's
        read quantized weights (through oneDNN ops that have no gradient), so
        the trainable variables are not on the packed path. Its gradient is
        therefore that of the encoder's own padded forward in the export's
        precision (bfloat16 compute for a bfloat16 export, float32 for int8),
        recomputed only when a gradient is taken. Every weight enters as a
        tensor (`keras.StatelessScope`), frozen ones too: a saved custom
        gradient that captures variables does not load into a differentiable
        restored function.
        """
        vectors = self._unit(self.packed(ids))
        if self.precision == "float32" or not differentiable:
            return vectors
        weights = self.encoder.variables
        trainable = {id(weight) for weight in self.encoder.trainable_variables}

        @tf.custom_gradient
        def straight_through(vectors, *values):
            def gradient(upstream):
                with keras.StatelessScope(state_mapping=list(zip(weights, values))):
                    reference = self._unit(self._encode(ids, False))
                wanted = [value for weight, value in zip(weights, values) if id(weight) in trainable]
                grads = iter(tf.gradients(reference, wanted, grad_ys=upstream))
                return [None] + [next(grads) if id(weight) in trainable else None for weight in weights]

            return tf.identity(vectors), gradient

        return straight_through(tf.stop_gradient(vectors), *[tf.convert_to_tensor(v.value) for v in weights])

    @tf.function(input_signature=[_STRINGS, tf.TensorSpec([], tf.bool)])
    def __call__(self, inputs, training=False):
        """`[b]` strings -> `[b, d]` unit vectors; `training` runs the encoder with dropout (fine-tuning).

        One traced function for every batch size and both modes: without a
        signature the restored function built a graph per new input shape
        (about 0.7 s each) and kept it (1,000 requests of 1-64 sentences grew
        peak memory 1.66x and ran at 138 sentences/s, now 1.03x and 195).
        Each branch of the `tf.cond` calls a function of its own: a custom
        gradient (the packed GELU's, `_packed_embed`'s) traced inside a branch
        itself does not rebind when a restored cond is differentiated, and
        `tape.gradient` failed with a bare `AssertionError`.
        """
        return tf.cond(training, lambda: self._train_embed(inputs), lambda: self._infer_embed(inputs))

    @tf.function(input_signature=[_STRINGS])
    def _train_embed(self, inputs):
        return self._embed(inputs, True)

    @tf.function(input_signature=[_STRINGS])
    def _infer_embed(self, inputs):
        return self._embed(inputs, False)

    @tf.function(input_signature=[_STRINGS])
    def serve(self, inputs):
        """The `serving_default` signature: `inputs` -> `outputs`."""
        return {OUTPUT_KEY: self._embed(inputs, False, differentiable=False)}


def resolve_export(path):
    """An export directory, or a training `model_dir` (then its `export/final`)."""
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        return path
    final = os.path.join(path, "export", "final")
    if os.path.exists(os.path.join(final, "saved_model.pb")):
        return final
    raise FileNotFoundError(f"No SavedModel at {path} nor at {final}.")


def internal_ops(path):
    """The op types of the SavedModel at `path` that are TensorFlow-internal (`_`-prefixed), sorted.

    Such ops have no Python API and no compatibility promise; stock TensorFlow
    and tensorflow-text graphs hold none, an int8 export holds oneDNN's
    (`_QuantizedMatMul`, `_MklLayerNorm`), which only x86-64 builds register.
    """
    saved = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(os.path.join(path, tf.saved_model.SAVED_MODEL_FILENAME_PB), "rb") as f:
        saved.ParseFromString(f.read())
    ops = set()
    for meta_graph in saved.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return sorted(op for op in ops if op.startswith("_"))


def check_loadable(path):
    """Raises `cpus.MachineError` where this TensorFlow registers none of an op the export at `path` needs (its
    metadata's `required_ops`: an int8 export's oneDNN ops, absent from builds without oneDNN such as macOS'),
    in one line naming the platform, before TensorFlow's "Op type not registered" deep in the load."""
    try:
        with open(os.path.join(path, METADATA_FILE), encoding="utf-8") as f:
            required = json.load(f).get("required_ops") or []
    except FileNotFoundError:
        return
    missing = [op for op in required if op_def_registry.get(op) is None]
    if missing:
        raise MachineError(f"the export at {path} needs TensorFlow ops {', '.join(missing)} (oneDNN's x86-64 int8 "
                           f"kernels), which this TensorFlow {tf.__version__} on {PLATFORMS[this_cpu().platform]} does "
                           "not register: int8 exports run on Linux x86-64; serve the float32 export (or a "
                           "mixed_bfloat16 one) here")


def export_metadata(tokenizer, encoder, step=None, objective=None, precision="float32", sub_batch_size=None,
                    inference="padded", selection=None, calibration=None, streams=None, required_ops=(),
                    single_sentence=None, cpu_requirements=(), output_dim=None):
    """What a user needs to know about an export: written beside it as `tf_msemb_export.json`.

    `required_ops`: the ops the graph needs beyond stock TensorFlow and
    tensorflow-text (`internal_ops`), with the TensorFlow version that wrote it;
    `cpu_requirements` what its kernels need of the CPU (`export.cpu_check`),
    checked when it loads.
    `prompt` is the text the export puts before every input itself;
    `prompts` the model's named prompts and `default_prompt_name` the one
    sentence-transformers falls back to, for callers to apply by task.
    """
    return {
        "format": "tf_msemb raw-string SavedModel",
        "tf_msemb_version": tf_msemb.__version__,
        "tensorflow_version": tf.__version__,
        "required_ops": list(required_ops),
        "cpu_requirements": [requirement.to_json() for requirement in cpu_requirements],
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "training_step": step,
        "objective": objective,
        "selection": selection,
        "signature": {"name": SIGNATURE, "input": INPUT_KEY, "output": OUTPUT_KEY},
        "serving_warmup": WARMUP_FILE,
        "input": "1-D tf.string tensor of raw sentences (normalized and tokenized inside)",
        "embedding_dim": int(output_dim or encoder.output_dim),
        "full_embedding_dim": int(encoder.output_dim),
        "max_tokens": int(tokenizer.max_length),
        "prompt": tokenizer.prompt,
        "prompts": dict(tokenizer.prompts),
        "default_prompt_name": tokenizer.default_prompt_name,
        "normalization": "l2 (unit-length rows; dot product = cosine)",
        "compute_precision": precision,
        "int8_calibration": calibration,
        "inference": inference,
        "packed_streams": streams,
        "packed_single_sentence": single_sentence,
        "length_sorted_sub_batch": sub_batch_size or None,
        "tokenizer": {
            "class": type(tokenizer).__name__,
            "asset": os.path.basename(tokenizer.asset_file) if tokenizer.asset_file else None,
            "config": portable_config(keras.saving.serialize_keras_object(tokenizer)["config"]),
        },
        "encoder": keras.saving.serialize_keras_object(encoder),
    }


def _packed(encoder, precision, streams, single_sentence):
    """A `PackedEncoder` of `encoder` computing in `precision`'s compute dtype, or None (logged) when unsupported."""
    reason = packed_support(encoder)
    if reason:
        logging.warning("Inference runs on padded batches: %s.", reason)
        return None
    return PackedEncoder(encoder, keras.DTypePolicy(precision).compute_dtype, streams=streams,
                         single_sentence=single_sentence)


@gin.configurable(denylist=["tokenizer", "encoder"])
def inference_module(tokenizer, encoder, precision="float32", sub_batch_size=32, packed=True, calibration_file=None,
                     calibration_sentences=2000, int8=None, streams=INFERENCE_STREAMS, single_sentence=False,
                     output_dim=None):
    """The `EmbeddingModule` an export saves: what the export runs, also usable in-process (dev evaluation).

    Speed switches (numerically safe defaults): `packed` (inference on the
    real tokens only, see `tf_msemb.inference.packed`; vectors equal to the Keras
    forward within 1e-5; encoders it cannot pack fall back to padded batches,
    with a warning), `sub_batch_size` (length-sorted sub-batches for padded
    batches, see `EmbeddingModule`; within 1e-5 of one padded batch) and
    `precision` (`"mixed_bfloat16"` computes in bfloat16 with float32 output:
    faster on CPUs with AVX512-BF16 and on TPUs, cosine to float32 vectors
    about 0.9999; default `"float32"`). A packed bfloat16 export keeps
    bfloat16 copies of the matmul weights, made at export: fine-tuning the
    exported variables changes training calls only, so export again after.
    `"int8"` runs the layers' matmuls on 8-bit integers (packed only; see
    `tf_msemb.inference.quantization`), calibrated on the first
    `calibration_sentences` lines of `calibration_file` (the last eighth
    held out to measure the choices) as `int8` says (an `Int8Options`:
    SmoothQuant alpha, activation ranges, bfloat16 fallback of the layers
    that lose most, the kernels of this CPU or `target`; default
    `Int8Options()`; its measured quality and speed: docs/int8.md and
    docs/cpus.md); its graph holds oneDNN ops that only x86-64 TensorFlow
    registers (the metadata's `required_ops`) and checks the CPU when it
    loads (`export.cpu_check`); `int8_support` decides from the CPU's flags.
    `streams`: side-by-side sub-batches of a packed export
    (`PackedEncoder.streams`, exact); serve it with TensorFlow's intra-op
    threads at cores / streams (docs/benchmarks.md, "Serving threads").
    `single_sentence`: a packed export encodes a request of one sentence on
    a branch of its own with a fraction of the ops
    (`PackedEncoder.single_sentence`; float32 within 1e-5 of the batch
    path, attention in float32 below it); off by default, as it slows
    batches in TF Serving's Session.
    `output_dim` cuts the vectors to their first `output_dim` dimensions,
    re-normalized, inside the graph (for an encoder trained with
    `train.matryoshka_widths`); the metadata's `embedding_dim` is then that
    width and `full_embedding_dim` the encoder's.
    An int8 or bfloat16 export checks the CPU when it loads
    (`export.cpu_check`: int8 writing bfloat16 or with 8-bit weights needs
    the AVX-512 / VNNI kernels of the CPU that wrote it; `Int8Options.target
    = "avx2"` makes one for every x86-64 CPU with AVX2).
    The module's `precision` attribute names the compute precision,
    `calibration` the int8 settings.
    """
    if precision == "int8":
        if not packed:
            raise ValueError("precision 'int8' runs packed only: drop packed=False.")
        computing = ensure_built(encoder)
        packed_encoder = int8_packed(tokenizer, computing, calibration_file, calibration_sentences, int8, streams,
                                     single_sentence)
        requirements = int8_requirements(packed_encoder.int8_options)
    else:
        if precision == "mixed_bfloat16":  # building runs the graph: oneDNN would abort where it has no kernel
            require(bfloat16_requirements(), "building a mixed_bfloat16 export here")
        computing = ensure_built(with_precision(encoder, precision))
        packed_encoder = _packed(computing, precision, streams, single_sentence) if packed else None
        requirements = bfloat16_requirements() if precision == "mixed_bfloat16" else []
    module = EmbeddingModule(tokenizer, computing, sub_batch_size=sub_batch_size, packed=packed_encoder,
                             precision=precision, cpu_requirements=requirements, output_dim=output_dim)
    # The calibration text by name and line count: an export names no path of the machine that wrote it.
    module.calibration = ({**describe_file(calibration_file), "sentences": calibration_sentences,
                           **packed_encoder.int8_report} if precision == "int8" else None)
    return module


def export_saved_model(tokenizer, encoder, path, step=None, objective=None, selection=None, provenance=None,
                       **inference_options):
    """Writes the SavedModel, TF Serving warm-up requests, `tf_msemb_export.json` and the model card
    (`README.md`, `export.model_card`) to `path`; returns `path`.

    `step`, `objective` (the objective's class and options) and `selection`
    (the dev metric that chose this step) go into the metadata when the
    export comes from training; `provenance` says where the weights came
    from (a training run's recipe, data, start and dev figures, or a
    pretrained source; a `operative_config` file it names is copied in).
    `inference_options` override the `inference_module` settings bound in
    gin (precision, sub_batch_size, packed).
    """
    module = inference_module(tokenizer, encoder, **inference_options)
    tf.saved_model.save(module, path, signatures={SIGNATURE: module.serve})
    packed = module.packed
    streams, single_sentence = (packed.streams, packed.single_sentence) if packed is not None else (None, None)
    write_warmup_requests(path, tokenizer=tokenizer, streams=streams or 1)
    provenance = dict(provenance or {})
    if provenance.get("operative_config"):
        with open(provenance["operative_config"], encoding="utf-8") as f:
            config = f.read()
        with open(os.path.join(path, OPERATIVE_CONFIG), "w", encoding="utf-8") as f:
            f.write(OPERATIVE_CONFIG_HEADER + portable_text(config))
        provenance["operative_config"] = OPERATIVE_CONFIG
    metadata = export_metadata(tokenizer, encoder, step, objective, module.precision, module.sub_batch_size,
                               "packed" if packed is not None else "padded", selection, module.calibration,
                               streams, internal_ops(path), single_sentence, module.cpu_requirements,
                               module.output_dim)
    with open(os.path.join(path, METADATA_FILE), "w", encoding="utf-8") as f:
        json.dump(portable_value(metadata | {"provenance": provenance or None}), f, indent=2, default=str)
    write_model_card(path)
    return path


def copy_version(path, export_dir, version, selection=None):
    """Copies the export at `path` to `export_dir/<version>`, naming `selection` in its metadata when given.

    The same weights need no second save: the copy loads and serves as the
    original; its model card is rendered again (its snippets name the copy).
    Returns the new path.
    """
    target = os.path.join(export_dir, version)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(path, target)
    if selection is not None:
        metadata_file = os.path.join(target, METADATA_FILE)
        with open(metadata_file, encoding="utf-8") as f:
            metadata = json.load(f)
        with open(metadata_file, "w", encoding="utf-8") as f:
            json.dump(metadata | {"selection": selection}, f, indent=2, default=str)
    write_model_card(target)
    return target


def export_version(tokenizer, encoder, export_dir, step, objective=None, final=False, version=None, selection=None,
                   provenance=None):
    """Writes `export_dir/<version>` (default: the step, a version TF Serving picks up) and, when `final`, copies
    it to `export_dir/final`.

    Returns the versioned path. An existing directory of the same version is replaced.
    """
    path = os.path.join(export_dir, version or str(step))
    shutil.rmtree(path, ignore_errors=True)
    export_saved_model(tokenizer, encoder, path, step=step, objective=objective, selection=selection,
                       provenance=provenance)
    if final:
        copy_version(path, export_dir, "final")
    return path
