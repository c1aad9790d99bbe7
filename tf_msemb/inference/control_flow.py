"""A `tf.cond` that runs only its taken branch, for inference graphs that branch on the request.

Inside a `tf.function`, `tf.cond` builds an `If` op marked for lowering:
TensorFlow rewrites it into `Switch` and `Merge` ops before running, and
every op of the branch not taken still passes through the executor as
"dead" (a `Switch` per input, an `Identity` per captured tensor, the
branch's constants). An int8 MiniLM export ran 1,846 ops for one sentence,
978 of them control flow. An `If` left unlowered calls the taken branch's
function only. The price: TensorFlow's graph rewrites (oneDNN ops, fusions)
do not reach a branch's ops. A `tf.function` called from the branch gets
them when the restored function runs, but not in a v1 Session (TF
Serving), so a branch is built from ops that need no rewrite.

TensorFlow has no public switch for this: `tf.cond` sets the
`_lower_using_switch_merge` attribute that its lowering pass reads, and TF's
own `execute_fn_for_device` builds its `Case` with it False. This sets it
False on the `If` that `tf.cond` built; should a TensorFlow release build
something else, the cond stays lowered (same result, slower).
"""

import tensorflow as tf

LOWERING_ATTR = "_lower_using_switch_merge"
_IF_OPS = ("If", "StatelessIf")


def unlowered_cond(pred, true_fn, false_fn):
    """`tf.cond(pred, true_fn, false_fn)` whose `If` op is kept as a function call (eagerly: `tf.cond`)."""
    outputs = tf.cond(pred, true_fn, false_fn)
    if tf.executing_eagerly():
        return outputs
    op = tf.nest.flatten(outputs)[0].op  # every output is an Identity of the one If's output
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    if op.type in _IF_OPS:
        op._set_attr(LOWERING_ATTR, tf.compat.v1.AttrValue(b=False))  # noqa: SLF001 -- see the module docstring
    return outputs
