"""Run-time checks that hold in every graph mode, and never order the step.

A check is a condition and a message. Under eager execution check() raises at
once. In a graph it returns a Check that guarded() applies to a value: the
value flows through a DeepReduce>Check op (deepreduce_tf.ops.fusion.check)
that raises InvalidArgumentError(message) when the condition is false.

Why not tf.debugging.Assert: Assert is a stateful op without a resource
input, and inside a tf.function TensorFlow's automatic control dependencies
chain every such op in program order. In a multi-device step (several local
replicas of MultiWorkerMirroredStrategy in one function) that chain crosses
replicas: an assertion that replica 0 makes after its collective must then run
before an assertion (or a tf.cond holding one) that replica 1 makes before its
own collective, which replica 0's collective waits for: the step hangs. The
Check op is stateless, and what it guards reads its output, so it is neither
chained nor pruned (in a TF1 graph run by a Session, an assertion nobody
depended on was pruned: the check silently did not happen).
"""
import collections

import tensorflow as tf

Check = collections.namedtuple("Check", ["condition", "message"])
Check.__doc__ = "A graph-mode check: the bool scalar that must hold and the error's message."


def guarded(value, *checks):
    """`value`, computed only after `checks` have passed. checks: Check
    objects (from check(); the value flows through each), other ops (the
    value then depends on them by control dependencies), or None (eager
    execution: nothing left to do)."""
    checks = [c for c in checks if c is not None]
    if not checks or tf.executing_eagerly():
        return value
    from deepreduce_tf.ops import fusion as fusion_ops  # the op library, on first use

    ops = [c for c in checks if not isinstance(c, Check)]
    for c in checks:
        if isinstance(c, Check):
            value = fusion_ops.check(value, c.condition, c.message)
    if ops:
        with tf.control_dependencies(ops):
            value = tf.identity(value)
    return value


def check(condition, message):
    """A check of `condition` (a bool scalar). Eagerly it raises
    InvalidArgumentError at once and returns None; in a graph it returns a
    Check for guarded()."""
    if tf.executing_eagerly():
        tf.debugging.Assert(condition, [message])
        return None
    return Check(condition, message)


def all_finite(x, message):
    """x, once every element of it is finite (a check, as above: not
    tf.debugging.assert_all_finite's stateful CheckNumerics)."""
    return guarded(x, check(tf.reduce_all(tf.math.is_finite(x)), message))
