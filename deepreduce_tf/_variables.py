"""State variables of the exchange: how they are made, and how a TF1 graph
initializes them without an initializer (the lowest floor: memory, the byte
ledger, the transport and the exchange all create variables through it)."""
import collections
import contextlib
import weakref

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

StateVar = collections.namedtuple("StateVar", ["name", "dtype", "shape", "per"])
StateVar.__doc__ = """One kind of state a step keeps between steps, as its owner (a memory, a
communicator, the exchange, a codec, the ledger) declares it when it is built.

name: the variable's name in checkpoints; dtype: its dtype ('gradient': the
gradient's own); shape: its shape, or how the model decides it (e.g. 'the
bucket's sparse section', '[m, rank]'); per: how many there are ('exchange':
one per replica; 'process': one per process, on its first replica's
exchange; 'bucket': one per fused bucket; 'matrix': one per compressed
matrix; 'codec': the codec's own). The variables themselves are
created on the first step, when the model's shapes are known: a declaration
says what a checkpoint must hold (deepreduce_tf.distribute warns when
nothing saves it) before any exists."""


def default_variable_factory(initial_value, name):
    """Creates a residual variable (overridable: tf.distribute needs
    per-replica variables)."""
    return tf.Variable(initial_value, trainable=False, name=name)


def _not_lifted(next_creator, **kwargs):
    # tf.function's own creator (below this one) counts every variable made
    # with lifting on as one its first call created, and then traces the
    # function a second time, to run it without creating any.
    kwargs["experimental_enable_variable_lifting"] = False
    return next_creator(**kwargs)


@contextlib.contextmanager
def state_scope():
    """Where the step creates a state variable, lazily, on its first run:
    under tf.init_scope (eagerly, or in the TF1 graph; never in the graph of
    a tf.function being traced), with variable lifting off: eagerly the
    variable is initialized at once (in a TF1 graph, ensure_initialized
    does it), so a tf.function being traced has nothing to lift out, and a
    user's tf.function around Exchange.compress traces once instead of twice
    (and may create the state of a new key in a later trace). Compute the
    initial value inside the scope too. Other variable creator scopes (a
    strategy's) still run."""
    with tf.init_scope(), tf.variable_creator_scope(_not_lifted):
        yield


_INIT_OPS = weakref.WeakKeyDictionary()  # graph -> {id(variable): (guard op, variable)}


def ensure_initialized(variables):
    """Ops that initialize those of `variables` that are not initialized yet.

    Under eager execution (also inside a tf.function) a variable is
    initialized when it is created, and this returns []. In a TF1-style graph
    run by a tf.compat.v1.Session, nobody may run an initializer (TensorFlow's
    own cross-device ops hold no state, so users do not expect to): the step
    then initializes its state itself, once, on its first run. Put the ops
    returned here in tf.control_dependencies around every read.
    """
    if tf.compat.v1.executing_eagerly_outside_functions():
        return []
    graph = tf.compat.v1.get_default_graph()
    cache = _INIT_OPS.setdefault(graph, {})
    ops = []
    for var in variables:
        handle = getattr(var, "handle", None)
        if handle is None:  # a TF1 RefVariable: its initializer is the user's
            continue
        op = cache.get(id(var))
        if op is None:
            # ONE guard per variable and graph: every reader depends on the
            # same op, so a first run cannot initialize a variable after
            # another reader already updated it.
            initial = var.initial_value

            def init(var=var, initial=initial):
                with tf.control_dependencies([var.assign(initial, read_value=False)]):
                    return tf.constant(True)

            op = tf.cond(resource_variable_ops.var_is_initialized_op(handle),
                         lambda: tf.constant(False), init)
            cache[id(var)] = (op, var)
        else:
            op = op[0]
        ops.append(op)
    return ops
