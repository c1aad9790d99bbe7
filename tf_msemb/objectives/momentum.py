"""Momentum copies of an encoder: the EMA teacher (seed 000) and MoCo's momentum encoders (seed 002)."""

import tensorflow as tf

from tf_msemb.models.encoder import ensure_built


def _first_replica_state(next_creator, **kwargs):
    # Every replica assigns the same value; ONLY_FIRST_REPLICA makes the first
    # replica's write land in every copy instead of each replica updating only
    # its own (which is what the default aggregation does).
    kwargs["aggregation"] = tf.VariableAggregation.ONLY_FIRST_REPLICA
    kwargs["trainable"] = False
    return next_creator(**kwargs)


def momentum_copy(encoder):
    """A weight-for-weight copy of `encoder` whose variables are non-trained state."""
    with tf.variable_creator_scope(_first_replica_state):
        clone = ensure_built(encoder.__class__.from_config(encoder.get_config()))
    clone.set_weights(ensure_built(encoder).get_weights())
    clone.trainable = False
    return clone


def momentum_update(copy, source, momentum):
    """`copy <- momentum * copy + (1 - momentum) * source` over every trained float weight (seed 002 Eq. 1).

    A non-trainable source weight (a frozen token table) never moves, so its
    copy already equals it: the update skips it (a 96M-row pass a step on
    XLM-R's vocabulary).
    """
    for copy_weight, source_weight in zip(copy.weights, source.weights):
        if "float" in str(source_weight.dtype) and source_weight.trainable:
            copy_weight.assign(momentum * copy_weight + (1.0 - momentum) * source_weight)
