"""Any raw-string export as an MTEB encoder: batches of strings in, float32 vectors out.

    import mteb
    from tf_msemb.evaluation.mteb.encoder import ExportEncoder
    mteb.evaluate(ExportEncoder("runs/exp1/export/final"), mteb.get_tasks(tasks=["STS17"]))

Prompts are those MTEB's run of the sentence-transformers checkpoint would
use (`SentenceTransformerEncoderWrapper` over `encode`, `encode_query` and
`encode_document`): the export's named prompts (`tf_msemb_export.json`'s
`prompts`, from the checkpoint's `config_sentence_transformers.json`, or
`model_prompts` given here) picked by task name, task type and query /
document side; failing one, the `query` prompt for queries, the first of
`document`, `passage`, `corpus` for documents, else `default_prompt_name`'s.
An export that puts a prompt before every text itself (its `prompt`) takes
no second one, and refuses a task where that checkpoint would have used
another.
"""

import json
import os
import re

import numpy as np
from mteb.models import ModelMeta
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.abs_encoder import get_prompt_name
from mteb.models.model_meta import ScoringFunction
from mteb.types import PromptType

from tf_msemb.export.model_card import METADATA_FILE
from tf_msemb.evaluation.encoding import encode
from tf_msemb.evaluation.encoding import load_model
from tf_msemb.evaluation.encoding import resolve_export

DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")


def export_name(path):
    """MTEB's model name for the export at `path`: `tf_msemb/<dir>`, or `tf_msemb/<run>-<version>` for a
    training run's `export/<step|final|best>`."""
    path = os.path.abspath(path)
    version, parent = os.path.basename(path), os.path.dirname(path)
    if os.path.basename(parent) == "export":
        return f"tf_msemb/{os.path.basename(os.path.dirname(parent))}-{version}"
    return f"tf_msemb/{version}"


def _revision(metadata):
    """MTEB's revision folder of an export: `step-<n>` for a training step, else its creation time (digits)."""
    if metadata.get("training_step") is not None:
        return f"step-{metadata['training_step']}"
    return re.sub(r"[^0-9T]", "", metadata.get("created") or "") or "export"


class ExportEncoder(AbsEncoder):
    """MTEB's `EncoderProtocol` over the SavedModel at `path` (an export or a training `model_dir`).

    Args:
        path: the export.
        batch_size: sentences per call of the export when `encode` is
            called without one (`mteb.evaluate` always passes its
            `encode_kwargs`' `batch_size`); sorted by length, as
            `evaluation.encoding.encode` batches them.
        model_prompts: named prompts replacing the export's own
            (`{"query": "query: ", "document": "passage: "}`), keyed as
            MTEB keys them (task name, task type, `query` / `document`), as
            `model_prompts` replaces a sentence-transformers model's.
        name: the model name MTEB files results under (default `export_name`).
    """

    def __init__(self, path, batch_size=64, model_prompts=None, name=None):
        self.path = resolve_export(path)
        with open(os.path.join(self.path, METADATA_FILE), encoding="utf-8") as f:
            self.metadata = json.load(f)
        self.built_in_prompt = self.metadata.get("prompt") or ""
        self.prompts = dict(self.metadata.get("prompts") or {} if model_prompts is None else model_prompts)
        self.default_prompt_name = self.metadata.get("default_prompt_name")
        self.model_prompts = self.validate_task_to_prompt_name(self.prompts, raise_for_invalid_keys=False)[0] \
            if self.prompts else None
        self.batch_size = batch_size
        self.model = load_model(self.path)
        self.mteb_model_meta = ModelMeta.create_empty(overwrites=dict(
            name=name or export_name(self.path),
            revision=_revision(self.metadata),
            framework=["TensorFlow"],
            similarity_fn_name=ScoringFunction.COSINE,
            embed_dim=self.metadata.get("embedding_dim"),
            max_tokens=self.metadata.get("max_tokens"),
            use_instructions=bool(self.model_prompts or self.built_in_prompt),
            open_weights=True,
        ))

    def checkpoint_prompt(self, task_metadata, prompt_type):
        """The text MTEB's run of the sentence-transformers checkpoint puts before this task's texts (`""`: none)."""
        if self.model_prompts:
            name = get_prompt_name(self.model_prompts, task_metadata, prompt_type)
            if name is not None and self.model_prompts.get(name) is not None:
                return self.model_prompts[name]
        if prompt_type == PromptType.query and "query" in self.prompts:
            return self.prompts["query"]
        if prompt_type == PromptType.document:
            name = next((name for name in DOCUMENT_PROMPT_NAMES if name in self.prompts), None)
            if name is not None:
                return self.prompts[name]
        return self.prompts.get(self.default_prompt_name, "") if self.default_prompt_name else ""

    def prompt(self, task_metadata, prompt_type):
        """The text put before this task's texts here: `checkpoint_prompt`, less the export's own prompt."""
        wanted = self.checkpoint_prompt(task_metadata, prompt_type)
        if not self.built_in_prompt:
            return wanted
        if wanted != self.built_in_prompt:
            side = f" {prompt_type.value}" if prompt_type else ""
            raise ValueError(f"{self.path} puts {self.built_in_prompt!r} before every text itself, but "
                             f"{task_metadata.name}'s{side} texts take {wanted!r}; export it with "
                             "--prompt= (tools/export_pretrained.py) or "
                             "load_pretrained.prompt = '' to run it with per-task prompts.")
        return ""

    def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
        """`[n, dim]` float32 unit vectors of the texts of every batch of `inputs`, in order."""
        del hf_split, hf_subset
        prompt = self.prompt(task_metadata, prompt_type)
        texts = [prompt + text for batch in inputs for text in batch["text"]]
        vectors = encode(self.model, texts, batch_size=kwargs.get("batch_size") or self.batch_size,
                         verbose=bool(kwargs.get("show_progress_bar", False)))
        return np.asarray(vectors, np.float32)
