"""A fixed teacher: a pretrained model that computes what its own checkpoint computes, whatever the student's bindings.

A distillation teacher (seed 001) may come with another tokenizer and width
than the student; its vectors are the target, so its own pooling,
normalization and text handling must stay. `load_pretrained`'s gin bindings
(`load_pretrained.pooling = "mean"` for an XLM-R student, text
normalization) describe the student and are not applied to it.
"""

from tf_msemb.models.pretrained import load_pretrained


def load_teacher(name_or_path, prompt=None):
    """`(tokenizer, encoder)` of a teacher, frozen, with its checkpoint's own pooling, normalization and text.

    Only `load_pretrained.max_length` still applies (a cut of long inputs, as `--smoke` makes). `prompt` (a
    prompt name of the checkpoint or a text; None: its default prompt, if any) is the teacher's own, whatever
    `load_pretrained.prompt` the student is bound to.
    """
    tokenizer, encoder = load_pretrained(name_or_path, pooling=None, normalize=None, text_normalization=False,
                                         prompt=prompt)
    encoder.trainable = False
    return tokenizer, encoder
