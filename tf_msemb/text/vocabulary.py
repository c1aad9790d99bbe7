"""The layout of our SentencePiece vocabularies, read by the trainer, the tokenizer, the pipeline and EMS.

Ids 0-3 are `<pad> <unk> <s> </s>`; then one `<2xx>` token per language
(seed 003's vocabulary layout; its XTR head embeds languages by index,
`data.features.LanguageIds`), never split.
"""

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_PIECES = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = SPECIAL_IDS = tuple(range(len(SPECIAL_PIECES)))
# The ids that mark structure rather than text: all special ids but <unk>.
CONTROL_IDS = (PAD_ID, BOS_ID, EOS_ID)


def language_token(language):
    """The target-language token of seed 003, e.g. `<2de>`."""
    return f"<2{language}>"
