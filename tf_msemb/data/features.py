"""Typed input features: the fields of a training batch beyond the pair's tokens.

An objective declares the features it needs (`Objective.input_features`);
the pipeline reads, balances, shuffles, filters and batches the pairs and
applies each declared feature in turn. A feature owns everything about its
field: the record fields it parses (`record_spec`), the check of the first
record of every shard (`check_record`, one line naming the problem), its
set-up against the corpora (`prepare`), the mapping of parsed records to
model inputs (`parse`, on chunks of records; `per_example`, after
unbatching), its padding values and, for whole batches read from elsewhere,
how they join the pair batches (`attach`). Adding a field is one class here.
Features apply in order, so a later one may replace a field of an earlier
one (`TargetTokens` re-tokenizes `tgt`).

Token fields are `{"token_ids", "padding_mask"}` like a tokenizer's output.
"""

import tensorflow as tf

from tf_msemb.data.corpora import corpus_streams
from tf_msemb.data.corpora import read_manifest
from tf_msemb.data.labeled_pairs import make_labeled_dataset
from tf_msemb.text_files import CorpusError


def token_inputs(ids):
    """Ragged ids `[n, (l)]` -> `{"token_ids", "padding_mask"}` (dense once unbatched and padded)."""
    return {"token_ids": ids, "padding_mask": tf.ones_like(ids, dtype=tf.bool)}


def token_padding(pad_id):
    return {"token_ids": tf.constant(pad_id, tf.int32), "padding_mask": False}


class InputFeature:
    """One field (or group of fields) of a batch; every hook defaults to doing nothing."""

    def record_spec(self):
        """`{record field: tf.io feature}` this feature parses; every field named is required in the records."""
        return {}

    def check_record(self, fields):
        """What is wrong with one record's `tf.train.Example` feature map for this feature, or None."""
        return None

    def prepare(self, tokenizer, corpora):
        """Checks and set-up against the corpora before reading starts (raises `CorpusError`)."""

    def parse(self, records, tokenizer):
        """Parsed records of one chunk `{field: [n, ...]}` -> this feature's batch fields `{name: [n, ...]}`."""
        return {}

    def per_example(self, example, tokenizer):
        """One unbatched example's fields, made paddable (dense)."""
        return example

    def padding(self, tokenizer):
        """`{name: padding value}` for every field `parse` adds."""
        return {}

    def attach(self, batches, tokenizer, input_context, seed):
        """Joins batches read from elsewhere to the pair batches."""
        return batches


class TextTokens(InputFeature):
    """`src`, `tgt`: the pair tokenized by the training tokenizer, not truncated (the pipeline drops long pairs)."""

    def parse(self, records, tokenizer):
        return {side: token_inputs(tokenizer.tokenize(records[side], truncate=False)) for side in ("src", "tgt")}

    def padding(self, tokenizer):
        return {side: token_padding(tokenizer.pad_id) for side in ("src", "tgt")}


class StoredTokenIds(TextTokens):
    """`src`, `tgt` from the token ids stored at writing time (`make_tfrecords.py --tokenizer`).

    The manifests must name this very tokenizer (its fingerprint), so the
    ids mean what the encoder expects.
    """

    def record_spec(self):
        return {"src_ids": tf.io.RaggedFeature(tf.int64), "tgt_ids": tf.io.RaggedFeature(tf.int64)}

    def prepare(self, tokenizer, corpora):
        expected = tokenizer.fingerprint()
        for corpus in corpora:
            stored = (read_manifest(corpus) or {}).get("tokenizer")
            if stored and stored["fingerprint"] == expected:
                continue
            found = (f"token ids of another tokenizer ({stored['class']} {stored['fingerprint']})" if stored
                     else "no token ids")
            raise CorpusError(
                f"make_dataset.pretokenized is set but {corpus} has {found}; the training tokenizer is "
                f"{type(tokenizer).__name__} {expected}. Rewrite it with tools/make_tfrecords.py --tokenizer=... "
                "or set make_dataset.pretokenized = False."
            )

    def parse(self, records, tokenizer):
        return {side: token_inputs(tf.cast(records[f"{side}_ids"], tf.int32)) for side in ("src", "tgt")}


class TeacherVectors(InputFeature):
    """`teacher` `[b, dim]`: a teacher's vector of `src`, precomputed into the records (seed 001, Sec. 3)."""

    def __init__(self, dim):
        self.dim = dim

    def record_spec(self):
        return {"teacher": tf.io.FixedLenFeature([self.dim], tf.float32)}

    def check_record(self, fields):
        size = len(fields["teacher"].float_list.value)
        if size != self.dim:
            return f"holds teacher vectors of {size} values but the objective expects teacher_dim={self.dim}"
        return None

    def parse(self, records, tokenizer):
        return {"teacher": records["teacher"]}

    def padding(self, tokenizer):
        return {"teacher": 0.0}


class TeacherNegatives(InputFeature):
    """`teacher_negatives` `[b, count, dim]`: the teacher's vectors of sentences near `src` in its space but not it.

    Hard negatives for ranking against teacher vectors, mined once from the
    stored vectors (`tools/mine_teacher_negatives.py`); seed 004 (Sec. 4.2)
    appends hard negatives to each example.
    """

    def __init__(self, count, dim):
        self.count, self.dim = count, dim

    def record_spec(self):
        return {"teacher_negatives": tf.io.FixedLenFeature([self.count * self.dim], tf.float32)}

    def check_record(self, fields):
        size = len(fields["teacher_negatives"].float_list.value)
        if size != self.count * self.dim:
            return (f"holds teacher negatives of {size} values but the objective expects "
                    f"{self.count} x teacher_dim {self.dim} = {self.count * self.dim}")
        return None

    def parse(self, records, tokenizer):
        return {"teacher_negatives": tf.reshape(records["teacher_negatives"], [-1, self.count, self.dim])}

    def padding(self, tokenizer):
        return {"teacher_negatives": 0.0}


class OwnTokenizerTokens(InputFeature):
    """A text column in another tower's own tokenizer, as the field `field`."""

    column = field = None

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def parse(self, records, tokenizer):
        return {self.field: token_inputs(self.tokenizer.tokenize(records[self.column]))}

    def padding(self, tokenizer):
        return {self.field: token_padding(self.tokenizer.pad_id)}


class TeacherTokens(OwnTokenizerTokens):
    """`teacher_src`: the source in a live teacher's own tokens (truncated to its length, never filtered)."""

    column, field = "src", "teacher_src"


class TargetTokens(OwnTokenizerTokens):
    """`tgt` in the target side's own tokenizer (seed 002: a pre-trained encoder per language, Sec. 2).

    Replaces the `tgt` of the training tokenizer; truncated to this
    tokenizer's `max_length`, then filtered by `max_tokens` like any pair.
    """

    column, field = "tgt", "tgt"


class HardNegatives(InputFeature):
    """`hard_negatives` `[b, count, length]` tokens: sentences close to `tgt` but wrong (seed 004, Sec. 4.2).

    Truncated to the tokenizer's `max_length`; records must hold exactly `count`.
    """

    def __init__(self, count):
        self.count = count

    def record_spec(self):
        return {"hard_negatives": tf.io.FixedLenFeature([self.count], tf.string)}

    def check_record(self, fields):
        size = len(fields["hard_negatives"].bytes_list.value)
        if size != self.count:
            return f"has {size} hard negatives per pair but num_hard_negatives={self.count}"
        return None

    def parse(self, records, tokenizer):
        flat = tokenizer.tokenize(tf.reshape(records["hard_negatives"], [-1]))
        return {"hard_negatives": tf.RaggedTensor.from_uniform_row_length(flat, self.count)}

    def per_example(self, example, tokenizer):
        ids = example["hard_negatives"]
        example["hard_negatives"] = {
            "token_ids": ids.to_tensor(default_value=tokenizer.pad_id),
            "padding_mask": ids.with_values(tf.ones_like(ids.flat_values, tf.bool)).to_tensor(default_value=False),
        }
        return example

    def padding(self, tokenizer):
        return {"hard_negatives": token_padding(tokenizer.pad_id)}


class LanguageIds(InputFeature):
    """`src_lang_id`, `tgt_lang_id` `[b]`: each side's language as an index into `languages` (seed 003's `<2xx>`
    one-hot, Eq. 2, without a token in the vocabulary, so any tokenizer works).

    `languages` defaults to the tags the manifests' pairs name, sorted; a tag
    in the records that the list lacks stops reading with the tag named, and
    so does a list longer than `max_languages` (the rows of the table the
    indices select).
    """

    def __init__(self, languages=None, max_languages=None):
        self.languages = tuple(languages) if languages else None
        self.max_languages = max_languages

    def prepare(self, tokenizer, corpora):
        languages = self.languages or tuple(sorted(
            {tag for corpus in corpora if read_manifest(corpus) for pair in corpus_streams(corpus)
             for tag in pair.split("-")}
        ))
        if not languages:
            raise CorpusError("Language ids need manifests (from make_tfrecords.py) or LanguageIds(languages).")
        if self.max_languages is not None and len(languages) > self.max_languages:
            raise CorpusError(f"{len(languages)} languages ({' '.join(languages)}) but a table of "
                              f"{self.max_languages} rows; raise max_languages (EMS.max_languages).")
        self._known = " ".join(languages)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(list(languages), list(range(len(languages))), tf.string, tf.int32),
            default_value=-1,
        )

    def _ids(self, tags):
        ids = self._table.lookup(tags)
        unknown = tf.boolean_mask(tags, ids < 0)
        check = tf.debugging.Assert(
            tf.size(unknown) == 0,
            ["Unknown language tag", unknown[:1], f"in the corpus; the run knows {self._known}"],
        )
        with tf.control_dependencies([check]):
            return tf.identity(ids)

    def parse(self, records, tokenizer):
        return {"src_lang_id": self._ids(records["src_lang"]), "tgt_lang_id": self._ids(records["tgt_lang"])}

    def padding(self, tokenizer):
        return {"src_lang_id": tf.constant(0, tf.int32), "tgt_lang_id": tf.constant(0, tf.int32)}


class RawText(InputFeature):
    """`src_text`, `tgt_text`: the raw strings (for inspection and tests)."""

    def parse(self, records, tokenizer):
        return {"src_text": records["src"], "tgt_text": records["tgt"]}

    def padding(self, tokenizer):
        return {"src_text": "", "tgt_text": ""}


class NliBatch(InputFeature):
    """`nli`: a batch of labeled NLI pairs beside every pair batch (seed 002, Appendix B).

    Args:
        path: an SNLI / MultiNLI jsonl file, or a list of them (`make_labeled_dataset`).
        global_batch_size: NLI pairs per step over all replicas.
        format: its reader (`"nli_jsonl"`).
    """

    def __init__(self, path, global_batch_size, format="nli_jsonl"):
        if not path:
            raise CorpusError("The NLI multi-task head needs the path of an SNLI/MultiNLI jsonl file "
                              "(e.g. DualMomentumContrast.nli_path).")
        self.path, self.global_batch_size, self.format = path, global_batch_size, format

    def attach(self, batches, tokenizer, input_context, seed):
        batch_size = (input_context.get_per_replica_batch_size(self.global_batch_size) if input_context
                      else self.global_batch_size)
        nli = make_labeled_dataset(self.path, tokenizer, batch_size, format=self.format, seed=seed,
                                   input_context=input_context)
        return tf.data.Dataset.zip(batches, nli).map(lambda batch, nli_batch: batch | {"nli": nli_batch})
