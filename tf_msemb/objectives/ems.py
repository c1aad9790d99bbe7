"""`EMS`: cross-lingual token-level reconstruction plus sentence-level contrast (seed 003)."""

import gin
import keras
import tensorflow as tf
from keras import ops

from tf_msemb.data.features import LanguageIds
from tf_msemb.losses.translation_ranking import bidirectional_ranking_loss
from tf_msemb.losses.xtr import bag_of_tokens
from tf_msemb.losses.xtr import bidirectional_xtr_loss
from tf_msemb.models.encoder import ensure_built
from tf_msemb.models.encoder import l2_normalize
from tf_msemb.objectives.base import Objective
from tf_msemb.objectives.cross_replica import gather_candidates
from tf_msemb.objectives.gradient_cache import Tower
from tf_msemb.text import vocabulary

CONTRASTIVE = ("info_nce", "ams", None)


@gin.configurable(denylist=["encoder"])
class EMS(Objective):
    """One shared encoder trained with `(L_XTR + L_cntrs) / |B|` (seed 003 Sec. III).

    XTR head (Eq. 2-5): the target language is embedded by a table of its
    own (`u_la = W_la onehot(<2xx>)`, `language_dim`; a row per language, so
    the vocabulary needs no `<2xx>` tokens), concatenated with the sentence
    vector `u`, passed through a swish layer `L_fc` and an output embedding
    `L_emb` over the vocabulary (no bias, not shared with the input
    embedding); its softmax must match the translation's bag of tokens
    (Eq. 6-7, both directions). Contrastive head: `g(u) = W1 relu(W2 u + b2)
    + b1` to `contrastive_dim`, then in-batch InfoNCE with temperature T both
    ways (Eq. 8-11): the paper's batch is each GPU's own; `gather_negatives`
    adds the targets of every replica. Only the encoder is exported.

    The objective ablations of the paper's Table XIV are switches:
    `language_embedding=False` (- langs tok), `contrastive=None` (- L_cntrs),
    `xtr=False` (- L_XTR), `contrastive_mlp=False` (- L_cntrs_mlp),
    `share_output_embedding=True` (share L_emb params),
    `contrastive="ams"` with `contrastive_mlp=False, xtr=False` (AMS instead
    of InfoNCE: LaBSE-EMS-vanilla), `contrastive="ams"` with `xtr=False`
    (AMS+MLP) and `contrastive="ams"` (AMS+MLP+XTR: LaBSE-EMS-joint).

    Args:
        encoder: a `SentenceEncoder` (mean pooling in the paper).
        xtr: train the XTR head.
        language_embedding: give the XTR head the target language (batches
            carry `src_lang_id`/`tgt_lang_id`, `data.features.LanguageIds`).
        language_dim: d_la (128).
        contrastive: `"info_nce"`, `"ams"` (margin, scale `1 / temperature`) or None.
        contrastive_mlp: the two-layer head before the contrastive loss.
        contrastive_dim: d_cntrs (128).
        temperature: T (0.1).
        margin: the AMS margin (0.3).
        gather_negatives: score each replica's sources against the targets
            of all replicas (and the reverse); False keeps each replica's
            batch to itself, as the paper's per-GPU batch of 152.
        share_output_embedding: `L_emb` is the transformer's input token
            embedding (Table XIV "share L_emb params", the tied output of
            the authors' earlier bilingual model); `L_fc` then maps to the
            encoder's hidden size so the two fit.
        ignore_ids: token ids left out of the bag of tokens; default: the
            run tokenizer's `control_ids` (pad, begin, end), or those of our
            SentencePiece layout (`text.vocabulary`) outside a run. `<unk>`
            stays in the bag: Eq. 7 counts every token of the sentence.
        languages: the language tags in the order of `W_la`'s rows (default:
            those the corpus manifests name, sorted: a run resumed on other
            corpora would read other rows, so recipes pin the list).
        max_languages: rows of `W_la` (at least the number of languages);
            rows of languages absent from the corpus are never read.
    """

    def __init__(self, encoder, xtr=True, language_embedding=True, language_dim=128, contrastive="info_nce",
                 contrastive_mlp=True, contrastive_dim=128, temperature=0.1, margin=0.3, gather_negatives=True,
                 share_output_embedding=False, ignore_ids=None, languages=None, max_languages=128, **kwargs):
        super().__init__(ensure_built(encoder), **kwargs)
        if contrastive not in CONTRASTIVE:
            raise ValueError(f"Unknown contrastive loss {contrastive!r}; choose from {CONTRASTIVE}.")
        if not xtr and contrastive is None:
            raise ValueError("EMS needs at least one objective: xtr=True or a contrastive loss.")
        self.xtr = xtr
        self.language_embedding = language_embedding and xtr
        self.contrastive = contrastive
        self.contrastive_mlp = contrastive_mlp and contrastive is not None
        self.temperature = temperature
        self.margin = margin if contrastive == "ams" else 0.0
        self.gather_negatives = gather_negatives
        self.share_output_embedding = share_output_embedding and xtr
        if ignore_ids is None:
            ignore_ids = self.run.tokenizer.control_ids if self.run.tokenizer else vocabulary.CONTROL_IDS
        self.ignore_ids = tuple(ignore_ids)
        if languages and (len(set(languages)) != len(languages) or len(languages) > max_languages):
            raise ValueError(f"EMS.languages {list(languages)} must be distinct tags, at most EMS.max_languages = "
                             f"{max_languages}.")
        self.languages = languages
        self.max_languages = max_languages
        dim, vocabulary_size = encoder.output_dim, encoder.vocabulary_size
        self.vocabulary_size = vocabulary_size
        if self.language_embedding:
            self.language_table = keras.layers.Embedding(self.max_languages, language_dim, name="language_embedding")
            self.language_table.build((None,))
        if xtr:
            width = dim + (language_dim if self.language_embedding else 0)
            if self.share_output_embedding:
                self.xtr_fc = keras.layers.Dense(self._input_embedding().shape[1], activation="swish", name="xtr_fc")
            else:
                self.xtr_fc = keras.layers.Dense(width, activation="swish", name="xtr_fc")
                self.xtr_output = keras.layers.Dense(vocabulary_size, use_bias=False, name="xtr_output_embedding")
                self.xtr_output.build((None, width))
            self.xtr_fc.build((None, width))
        if self.contrastive_mlp:
            self.contrastive_hidden = keras.layers.Dense(dim, activation="relu", name="contrastive_hidden")
            self.contrastive_output = keras.layers.Dense(contrastive_dim, name="contrastive_output")
            self.contrastive_hidden.build((None, dim))
            self.contrastive_output.build((None, dim))
        self.add_trackers("loss", "xtr_loss", "contrastive_loss")

    @property
    def input_features(self):
        """Both sides' language indices when the XTR head is told the target language."""
        return [LanguageIds(self.languages, self.max_languages)] if self.language_embedding else []

    def call(self, inputs, training=False):
        return l2_normalize(self.encoder(inputs, training=training))

    def _input_embedding(self):
        """The encoder's input token embedding `[V, hidden]`, which `share_output_embedding` reuses as `W_emb`."""
        layer = getattr(getattr(self.encoder, "backbone", None), "token_embedding", None)
        if layer is None:
            raise ValueError("EMS.share_output_embedding needs an encoder whose backbone has a token_embedding layer.")
        return layer.embeddings

    def xtr_logits(self, sentence, language_id=None):
        """`W_emb swish(W_fc [u_la ; u] + b_fc)` (Eq. 4-5), before the softmax."""
        if self.language_embedding:
            sentence = tf.concat([self.language_table(language_id), sentence], axis=-1)
        hidden = self.xtr_fc(sentence)
        if self.share_output_embedding:
            return ops.matmul(hidden, ops.transpose(ops.cast(self._input_embedding(), hidden.dtype)))
        return self.xtr_output(hidden)

    def contrastive_projection(self, sentence):
        """`g(u) = W1 relu(W2 u + b2) + b1`, or `u` itself without the MLP, L2-normalized."""
        if self.contrastive_mlp:
            sentence = self.contrastive_output(self.contrastive_hidden(sentence))
        return l2_normalize(sentence)

    def losses_for(self, data, training=True):
        """`(xtr loss, contrastive loss)` of a batch; either is 0 when switched off."""
        u = self.encoder(data["src"], training=training)
        v = self.encoder(data["tgt"], training=training)
        return self.losses_from_sentences(u, v, data)

    def losses_from_sentences(self, u, v, data):
        """`(xtr loss, contrastive loss)` of sentence vectors `u` (sources) and `v` (targets) of `data`."""
        xtr_loss = contrastive_loss = tf.constant(0.0)
        if self.xtr:
            bags = [
                bag_of_tokens(data[side]["token_ids"], data[side]["padding_mask"], self.vocabulary_size,
                              self.ignore_ids)
                for side in ("src", "tgt")
            ]
            logits_u = self.xtr_logits(u, data.get("tgt_lang_id"))
            logits_v = self.xtr_logits(v, data.get("src_lang_id"))
            xtr_loss = bidirectional_xtr_loss(bags[0], bags[1], logits_u, logits_v)
        if self.contrastive is not None:
            x, y = self.contrastive_projection(u), self.contrastive_projection(v)
            if self.gather_negatives:
                (x_all, y_all), labels = gather_candidates(x, y)
            else:
                x_all, y_all, labels = x, y, tf.range(tf.shape(x)[0])
            contrastive_loss = bidirectional_ranking_loss(x, y, x_all, y_all, labels, 1.0 / self.temperature,
                                                          self.margin)
        return xtr_loss, contrastive_loss

    def towers(self, data):
        """Sources (`u`) and targets (`v`) through the one encoder; the heads run in `batch_loss`."""
        return {"u": Tower(self.encoder, data["src"]), "v": Tower(self.encoder, data["tgt"])}

    def batch_loss(self, embeddings, data):
        xtr_loss, contrastive_loss = self.losses_from_sentences(embeddings["u"], embeddings["v"], data)
        return {"loss": xtr_loss + contrastive_loss, "xtr_loss": xtr_loss, "contrastive_loss": contrastive_loss}

    def train_step(self, data):
        return self.report(**self.embedding_step(data))
