"""The model card of an export: `README.md` beside `saved_model.pb`, rendered from `tf_msemb_export.json`.

What a person who receives the directory needs, as a Hugging Face model card
or a TF-Hub page gives it: what the model is (architecture, vocabulary,
dimension, pooling, normalization, prompts, precision and the ops an int8
export needs), where it came from (the metadata's `provenance`: recipe, gin
config, data, steps, start checkpoint, or the pretrained source), how well it
does (the run's dev figures and the step chosen as best) and how to load it:
`tf.saved_model.load`, Keras 3 `TFSMLayer`, `hub.KerasLayer`, TF Serving's
`models.config` and the Beam encode pipeline, each a snippet that names the
export's directory in one variable, so it runs wherever the directory was
copied (`tests/export/test_model_card.py` moves an export and runs them).
Nothing in the card or the metadata names a path of the writing machine
(`tf_msemb.provenance`).
The metadata stays the machine-readable record; the card is rendered from
it alone, so re-rendering after the metadata changes (`copy_version`) keeps
them in step.
"""

import json
import os
import shlex

from tf_msemb.inference.int8_calibration import describe_fallback
from tf_msemb.inference.int8_calibration import describe_outliers
from tf_msemb.provenance import file_label

CARD_FILE = "README.md"
METADATA_FILE = "tf_msemb_export.json"
# The encoder settings the card names, where the encoder's config has them.
_ARCHITECTURE_KEYS = ("num_layers", "hidden_dim", "num_heads", "intermediate_dim", "pooling", "normalize",
                      "output_dim")


def _find(config, key):
    """The first value of `key` anywhere in a nested Keras config, or None."""
    if isinstance(config, dict):
        if key in config and not isinstance(config[key], (dict, list)):
            return config[key]
        for value in config.values():
            found = _find(value, key)
            if found is not None:
                return found
    if isinstance(config, list):
        for value in config:
            found = _find(value, key)
            if found is not None:
                return found
    return None


def _serving(path, metadata):
    """The shell lines that give TF Serving a numbered version folder of this export and write its
    `models.config` (TF Serving wants an absolute `base_path`: the lines compute it where they run)."""
    name = os.path.basename(path)
    if name.isdigit():
        base = 'BASE_PATH=$(cd "$(dirname "$EXPORT_DIR")" && pwd)  # this export is version ' + name + " already"
    else:
        version = metadata.get("training_step") or 1
        base = (f'mkdir -p serving/tf_msemb && cp -r "$EXPORT_DIR" serving/tf_msemb/{version}\n'
                "BASE_PATH=$PWD/serving/tf_msemb")
    config = ('model_config_list {\n  config {\n    name: "tf_msemb"\n    base_path: "$BASE_PATH"\n'
              '    model_platform: "tensorflow"\n  }\n}')
    return f"{base}\ncat > models.config <<EOF\n{config}\nEOF"


def _file(record):
    """A data or calibration file as recorded: `describe_file`'s dict, or a plain name in older exports."""
    return file_label(record) if isinstance(record, dict) else str(record)


def _source(source):
    """One line for a `models.pretrained.describe_source` record (a plain string in older exports)."""
    if not isinstance(source, dict):
        return str(source)
    if source.get("package"):
        return f"{source['name']} (package {source['package']})"
    config = source.get("config")
    if not config:
        return source["name"]
    parts = [", ".join(config.get("architectures") or []) or config.get("model_type", "")]
    parts += [f"{key} {config[key]}" for key in ("num_hidden_layers", "hidden_size", "vocab_size") if key in config]
    if config.get("_name_or_path"):
        parts.append(f"from {config['_name_or_path']}")
    return f"{source['name']} (config.json: {', '.join(p for p in parts if p)})"


def _model_rows(metadata):
    encoder, tokenizer = metadata.get("encoder") or {}, metadata.get("tokenizer") or {}
    architecture = ", ".join(f"{key} {_find(encoder, key)}" for key in _ARCHITECTURE_KEYS
                             if _find(encoder, key) is not None)
    precision = metadata["compute_precision"]
    if metadata.get("int8_calibration"):
        calibration = metadata["int8_calibration"]
        cosine = (calibration.get("sentence_cosine") or {}).get("exported") or {}
        precision += (f" (calibrated on the first {calibration['sentences']} lines at most of "
                      f"{_file(calibration)}, SmoothQuant smoothing {calibration.get('smoothing')}, "
                      f"{calibration.get('ranges')} activation ranges; "
                      f"weights scaled per {'pair of rows' if calibration.get('weight_scale') == 'paired' else 'column'}; "
                      "attention in "
                      f"{calibration.get('attention') or 'bfloat16'}; in "
                      f"{calibration.get('fallback_dtype') or 'bfloat16'}: "
                      f"{describe_fallback(calibration)}; float32 GELU channels: {describe_outliers(calibration)}; "
                      "held-out sentence cosine to float32: "
                      f"mean {cosine.get('mean')}, min {cosine.get('min')})")
    prompts = metadata.get("prompts") or {}
    default = metadata.get("default_prompt_name")
    rows = [
        ("architecture", f"{encoder.get('class_name', '?')}" + (f": {architecture}" if architecture else "")),
        ("vocabulary", f"{tokenizer.get('class', '?')} ({tokenizer.get('asset') or 'no asset file'})"),
        ("longest input", f"{metadata.get('max_tokens', '?')} tokens, special tokens included (longer inputs are "
                          "truncated)"),
        ("embedding dimension", metadata["embedding_dim"] if metadata.get("full_embedding_dim", metadata[
            "embedding_dim"]) == metadata["embedding_dim"] else f"{metadata['embedding_dim']} (the first "
         f"{metadata['embedding_dim']} of the encoder's {metadata['full_embedding_dim']}, re-normalized)"),
        ("normalization", metadata["normalization"]),
        ("prompt applied inside", repr(metadata.get("prompt") or "") if metadata.get("prompt") else "none"),
        ("named prompts (applied by callers)", ", ".join(f"{k}: {v!r}" for k, v in prompts.items()) or "none"),
        ("default prompt name", default or "none"),
        ("compute precision", precision),
        ("inference", metadata["inference"] + (f", {metadata['packed_streams']} streams"
                                               if metadata.get("packed_streams") else "")),
        ("ops beyond stock TensorFlow and tensorflow-text",
         ", ".join(metadata["required_ops"]) + " (oneDNN's, registered by x86-64 TensorFlow builds only)"
         if metadata.get("required_ops") else "none"),
        ("CPU it needs (checked when it loads)", "; ".join(
            f"{' or '.join(need['any_of_isa'])} for {need['for']}" for need in metadata["cpu_requirements"])
         if metadata.get("cpu_requirements") else "any"),
        ("written by", f"tf_msemb {metadata['tf_msemb_version']}, TensorFlow {metadata['tensorflow_version']}, "
                       f"{metadata['created']}"),
    ]
    return rows


def provenance_table(metadata):
    """The rows of where the weights came from (recipe, data, start, steps; or the pretrained source)."""
    provenance = metadata.get("provenance") or {}
    if provenance.get("kind") == "training":
        recipe = ", ".join(provenance.get("gin_files") or []) or "bindings only"
        rows = [("recipe", recipe + (" (a --smoke run: tiny model, few steps)" if provenance.get("smoke") else "")),
                ("bindings on the command line", "; ".join(provenance.get("gin_params") or []) or "none"),
                ("full gin config", f"`{provenance['operative_config']}` (in this directory)"
                 if provenance.get("operative_config") else "not recorded"),
                ("objective", (metadata.get("objective") or {}).get("class", "?")),
                ("data", "; ".join(_file(record) for record in provenance.get("data") or []) or "not recorded"),
                ("start checkpoint", _source(provenance["start"]) if provenance.get("start")
                 else "none (trained from scratch)"),
                ("steps", f"{metadata.get('training_step')} of {provenance.get('num_steps')}, global batch "
                          f"{provenance.get('global_batch_size')}"),
                ("training run", provenance.get("model_dir"))]
    elif provenance.get("kind") == "pretrained":
        rows = [("source", _source(provenance.get("source"))), ("command", f"`{provenance.get('command')}`")]
    else:
        rows = [("source", "not recorded")]
    axes = provenance.get("principal_axes")
    if axes:
        counts = axes.get("sentences") or {}
        rows.append(("principal axes", f"`{axes.get('rotated_export')}` rotated onto the principal axes of its "
                     f"vectors of {sum(counts.values())} sentences ({', '.join(counts)}) of "
                     f"{', '.join(axes.get('corpora') or [])}; energy a cut keeps: " + ", ".join(
                         f"{width} dims {share:.1%}" for width, share in (axes.get("energy_kept") or {}).items())))
        turn = axes.get("turned")
        if turn:
            rows.append(("turned axes", f"{turn['steps']} steps to keep the full-width cosines at "
                         f"{', '.join(map(str, turn['widths']))} dims; nested similarity loss on the sample "
                         f"{turn['loss_axes']} on the axes, {turn['loss_turned']} turned"))
    return "\n".join(f"| {k} | {v} |" for k, v in rows)


def dev_results_section(metadata):
    """The run's dev figures as a table (or why there are none)."""
    results = (metadata.get("provenance") or {}).get("dev_results") or []
    if not results:
        reason = ("No dev evaluation ran in training (`train.evaluators`)"
                  if (metadata.get("provenance") or {}).get("kind") == "training"
                  else "No dev figures are recorded for an export of a pretrained checkpoint")
        return f"{reason}; evaluate it with `python -m tf_msemb.evaluate` (`--task=mteb` for MTEB's tasks)."
    columns = list(dict.fromkeys(k for row in results for k in row if k != "step" and k.count("/") == 1))
    lines = ["| step | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for row in results:
        lines.append(f"| {row['step']} | " + " | ".join(f"{row[c]:.4f}" if c in row else "-" for c in columns) + " |")
    selection = metadata.get("selection")
    chosen = (f"\n\nThis export is the best step by `{selection['metric']}` ({selection.get('mode', 'max')}): "
              f"step {selection.get('step')}, {selection.get('value')}." if isinstance(selection, dict) else "")
    return "Dev figures of the run (`eval_results.jsonl`; summary metrics, the mean over each evaluator's sets):\n\n" \
        + "\n".join(lines) + chosen


def training_sections(metadata):
    """The "Where it came from" and "How well it does" sections of a card written elsewhere (sentence-transformers,
    keras-hub) from an export's `metadata`; empty without metadata."""
    if not metadata:
        return ""
    return f"""
## Where it came from

| | |
|---|---|
{provenance_table(metadata)}

## How well it does

{dev_results_section(metadata)}
"""


def render(path, metadata):
    """The card of the export at `path` with `metadata`; its snippets name the directory by its base name only."""
    path = os.path.abspath(path)
    directory = os.path.basename(path)
    name = os.path.basename(os.path.dirname(os.path.dirname(path))) if os.path.basename(
        os.path.dirname(path)) == "export" else directory
    int8 = ("\nThis export holds oneDNN int8 ops: it loads with x86-64 builds of TensorFlow (and TF Serving) only.\n"
            if metadata.get("required_ops") else "")
    if metadata.get("cpu_requirements"):
        int8 += ("\nIts kernels need the CPU features in the table below (oneDNN ISAs); on a CPU without them loading "
                 "stops with an error naming the missing flags (`tf_msemb.export.cpu_check`).\n")
    sentences = "Hallo Welt", "hello world"
    serving_intro = (f"This export is one (version {directory}); these lines write `models.config` for it:"
                     if directory.isdigit() else "These lines copy this export into one and write `models.config`:")
    python_dir = f'export_dir = {directory!r}  # this export\'s directory: its path from where you run this'
    shell_dir = f"EXPORT_DIR={shlex.quote(directory)}  # this export's directory: its path from where you run this"
    return f"""# {name}

A tf_msemb sentence encoder: a SavedModel that takes a 1-D `tf.string` tensor of raw sentences (normalization and
tokenization run inside) and returns L2-normalized float32 vectors `[batch, {metadata['embedding_dim']}]`
(cosine = dot product). Signature `{metadata['signature']['name']}`: input `{metadata['signature']['input']}`,
output `{metadata['signature']['output']}`. The machine-readable record is `{METADATA_FILE}`.
{int8}
## Model

| | |
|---|---|
""" + "\n".join(f"| {k} | {v} |" for k, v in _model_rows(metadata)) + f"""

## Where it came from

| | |
|---|---|
{provenance_table(metadata)}

## How well it does

{dev_results_section(metadata)}

## How to load it

Every reader needs `tensorflow` and `tensorflow-text` ({metadata['tensorflow_version']} wrote it). Each snippet
names this export's directory once, in its first line (`export_dir`, `EXPORT_DIR`): as written they run from the
directory that holds it; elsewhere, set that line to its path.

`tf.saved_model.load`:

```python
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops

{python_dir}
model = tf.saved_model.load(export_dir)
vectors = model(tf.constant({list(sentences)!r}))
print(vectors.shape)
```

Keras 3, as a layer:

```python
import keras
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops

{python_dir}
layer = keras.layers.TFSMLayer(export_dir, call_endpoint="serving_default")
print(layer(tf.constant({list(sentences)!r}))["outputs"].shape)
```

TF-Hub (`tensorflow-hub` with `tf-keras`; tensorflow-hub 0.16 also needs setuptools < 81), trainable for
fine-tuning:

```python
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # registers the tokenizer ops

{python_dir}
layer = hub.KerasLayer(export_dir, trainable=True)
print(layer(tf.constant({list(sentences)!r})).shape)
```

TF Serving serves numbered version folders under a base path, replaying the warm-up requests in
`assets.extra/` as it loads one. {serving_intro}

```sh
{shell_dir}
{_serving(path, metadata)}
```

Then start the model server beside `models.config` and send it sentences:

```sh
tensorflow_model_server --rest_api_port=8501 --model_config_file=models.config --enable_model_warmup=true \\
    --tensorflow_intra_op_parallelism=1
curl -d '{{"instances": ["Hallo Welt"]}}' localhost:8501/v1/models/tf_msemb:predict
```

Apache Beam (`pip install 'tf_msemb[beam]'`): every line of a corpus encoded into vector shards, on any runner:

```sh
{shell_dir}
python -m tf_msemb.pipelines.encode --model="$EXPORT_DIR" --input='corpus/*.txt' --output_dir=encoded
```
"""


def write_model_card(path):
    """Writes `path/README.md` from `path/tf_msemb_export.json`; returns the card's path."""
    path = os.path.abspath(path)
    with open(os.path.join(path, METADATA_FILE), encoding="utf-8") as f:
        metadata = json.load(f)
    card = os.path.join(path, CARD_FILE)
    with open(card, "w", encoding="utf-8") as f:
        f.write(render(path, metadata))
    return card
