"""Error-feedback memory (GRACE's Memory): what was not sent is kept.

  none      nothing is kept.
  residual  per variable, r <- (beta * r + gamma * g) - decoded, where decoded
            is exactly what the receivers decode from the payload. With
            beta = gamma = 1 (the default) nothing is lost: over T steps
            sum(decoded) + r_T = sum(g), to float rounding.

The residual of each variable is a non-trainable tf.Variable created lazily on
the first compress of that variable (eagerly or inside tf.function: creation
is lifted out with tf.init_scope). Memory objects are tf.Modules, so a
tf.train.Checkpoint that holds them (or the compressor) saves the residuals;
restoring before the variables exist is deferred until they are created
(see deepreduce_tf.state for the exchange's state as a whole).
"""
import abc
import collections
import re
import sys

import tensorflow as tf

from deepreduce_tf._variables import (StateVar, default_variable_factory,  # noqa: F401
                                      ensure_initialized)
from deepreduce_tf.ops import fusion as fusion_ops


class Memory(tf.Module, abc.ABC):
    """Base class: compensate() before compressing, update() after."""

    name_ = None
    # The state it keeps (_variables.StateVar), declared. A memory of your
    # own keeps state unless it says otherwise (NoMemory), and returns its
    # variables from state_variables() (TF1 graphs initialize them there).
    STATE = (StateVar("memory", "gradient", "its own", "bucket"),)

    def state_variables(self, key, like):
        """The variables of `key` (created, shaped like `like`, on first
        use): those its STATE declares."""
        return []

    def use_factory(self, variable_factory):
        """Creates its variables with `variable_factory` from now on, unless
        it was built with a factory of its own (the exchange's replica
        variables under tf.distribute)."""

    @abc.abstractmethod
    def compensate(self, tensor, key):
        """tensor: the flat gradient; key: the variable's name. Returns the
        tensor to compress."""

    @abc.abstractmethod
    def update(self, key, compensated, decoded, keep=None):
        """Stores compensated - decoded for `key`. keep: optional bool scalar
        tensor; where True the stored residual is left unchanged (a step that
        was sent dense because it held NaN/Inf), or reset to zero with a
        warning if it is not finite itself. Returns the update op (or
        None): callers make their output depend on it, so that a TF1 graph
        runs it."""

    def compensate_within(self, tensor, key, limit):
        """(compensate(tensor, key), fusion_ops.all_within(of it, limit)):
        the compensated tensor and whether the value codec can carry it.
        ResidualMemory does both in one pass."""
        compensated = self.compensate(tensor, key)
        return compensated, fusion_ops.all_within(compensated, limit)

    def update_sent(self, key, compensated, sent, keep=None):
        """update() with what was sent given as a Sent (sparse form). The
        default materializes the decoded tensor; ResidualMemory does not."""
        return self.update(key, compensated, sent.decoded(compensated), keep=keep)

    def config(self):
        return {}


class Sent(collections.namedtuple("Sent", ["rest", "positions", "values"])):
    """What the receivers decode from a payload, in the form error feedback
    needs without a dense pass: compensated - decoded equals `rest` with
    `values` subtracted at `positions` (int64 [count], unique). A sparse
    step: rest = compensated; a step sent dense: rest = zeros, no positions;
    a lossy dense codec: rest = compensated - decoded, no positions."""

    def residual(self):
        if self.positions.shape.num_elements() == 0:
            return self.rest
        return fusion_ops.scatter_subtract(self.rest, self.positions, self.values)

    def decoded(self, compensated):
        """The dense decoded tensor (for memories that want it)."""
        return compensated - self.residual()


class NoMemory(Memory):
    name_ = "none"
    STATE = ()

    def compensate(self, tensor, key):
        return tensor

    def update(self, key, compensated, decoded, keep=None):
        return None

    def update_sent(self, key, compensated, sent, keep=None):
        return None


def _slot_name(key):
    """A checkpoint-friendly attribute name for a variable key."""
    return re.sub(r"[^0-9A-Za-z_.-]", "_", key)


class ResidualMemory(Memory):
    name_ = "residual"
    STATE = (StateVar("residual", "gradient", "the bucket's sparse section", "bucket"),)

    def __init__(self, beta=1.0, gamma=1.0, variable_factory=None, name=None):
        super().__init__(name=name)
        self.beta = float(beta)
        self.gamma = float(gamma)
        self._factory_given = variable_factory is not None
        self._factory = variable_factory or default_variable_factory
        self.residuals = {}

    def config(self):
        return {"beta": self.beta, "gamma": self.gamma}

    def use_factory(self, variable_factory):
        if not self._factory_given:
            self._factory = variable_factory

    def state_variables(self, key, like):
        return [self.residual(key, like=like)]

    def residual(self, key, like=None):
        """The residual variable of `key`, created (zeros shaped like `like`)
        on first use."""
        var = self.residuals.get(key)
        if var is None:
            if like is None:
                raise KeyError(f"no residual for {key!r} yet; known: {sorted(self.residuals)}")
            if not like.shape.is_fully_defined():
                raise ValueError(f"residual memory needs a static shape for {key!r}, "
                                 f"got {like.shape}")
            with tf.init_scope():  # tracked eagerly: a deferred restore assigns at once
                var = self._factory(tf.zeros(like.shape, like.dtype),
                                    f"residual/{_slot_name(key)}")
                self.residuals[key] = var
        elif like is not None and (var.shape != like.shape or var.dtype != like.dtype):
            raise ValueError(f"residual memory: {key!r} was first seen as {var.dtype.name} "
                             f"{var.shape}, now {like.dtype.name} {like.shape}; use one key "
                             "per variable")
        return var

    def compensate(self, tensor, key):
        r = self.residual(key, like=tensor)
        if self.beta == 1.0 and self.gamma == 1.0:
            return tensor + r
        return tf.cast(self.beta, tensor.dtype) * r + tf.cast(self.gamma, tensor.dtype) * tensor

    def compensate_within(self, tensor, key, limit):
        if self.beta == 1.0 and self.gamma == 1.0:
            r = self.residual(key, like=tensor)
            return fusion_ops.add_within(tensor, r, limit)
        return super().compensate_within(tensor, key, limit)

    def update(self, key, compensated, decoded, keep=None):
        return self._store(key, compensated, lambda: compensated - decoded, keep)

    def update_sent(self, key, compensated, sent, keep=None):
        # One copy of rest and K subtractions, instead of a dense scatter of
        # the decoded values and a dense subtraction.
        return self._store(key, compensated, sent.residual, keep)

    def _store(self, key, compensated, new_residual, keep):
        r = self.residual(key, like=compensated)
        if keep is None:
            return r.assign(new_residual())

        def kept():
            # A residual that is not finite (restored from an old run, say)
            # would make every later step dense: reset it, and say so.
            old = r.read_value()
            return tf.cond(tf.reduce_all(tf.math.is_finite(old)), lambda: old,
                           lambda: _reset(key, old))

        return r.assign(tf.cond(keep, kept, new_residual))


def _reset(key, residual):
    """Zeros for a non-finite residual, with a warning on stderr."""
    warn = tf.print(f"deepreduce_tf: WARNING: the residual of {key!r} held NaN or Inf; it is "
                    "reset to zero (the error feedback of earlier steps is lost)",
                    output_stream=sys.stderr)
    with tf.control_dependencies([warn]):
        return tf.zeros_like(residual)


class MomentumCorrectionMemory(ResidualMemory):
    """DGC's momentum correction and momentum factor masking (Lin et al.,
    ICLR 2018): error feedback accumulates the VELOCITY, not the raw
    gradient, so that momentum SGD keeps its meaning under sparsification.

        u <- m u + g          (velocity, per worker)
        v <- v + u            (what is compressed: accumulated velocity)
        send top-k of v; v <- v - sent
        u[sent positions] <- 0   (factor masking: no stale momentum)

    The optimizer must then be plain SGD (momentum 0): the momentum lives
    here. A step sent dense (overflow, warm-up) masks nothing, so a dense
    step is exactly one step of momentum SGD. With m = 0 this is
    ResidualMemory.
    """

    name_ = "dgc"
    STATE = ResidualMemory.STATE + (
        StateVar("velocity", "gradient", "the bucket's sparse section", "bucket"),)

    def __init__(self, momentum=0.9, variable_factory=None, name=None):
        super().__init__(variable_factory=variable_factory, name=name)
        momentum = float(momentum)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum!r}")
        self.momentum = momentum
        self.velocities = {}
        # compensate() -> the new velocity, which update_sent() masks and
        # stores (both run in the same step's graph).
        object.__setattr__(self, "_new_velocity", {})

    def config(self):
        return {"momentum": self.momentum}

    def velocity(self, key, like):
        var = self.velocities.get(key)
        if var is None:
            with tf.init_scope():
                var = self._factory(tf.zeros(like.shape, like.dtype),
                                    f"velocity/{_slot_name(key)}")
                self.velocities[key] = var
        return var

    def state_variables(self, key, like):
        return [self.residual(key, like=like), self.velocity(key, like)]

    def _velocity_step(self, tensor, key):
        """(v, u_new): the residual and the new velocity m u + g, which
        update_sent() will mask and store."""
        v = self.residual(key, like=tensor)
        u = self.velocity(key, tensor)
        u_new = tf.cast(self.momentum, tensor.dtype) * u + tensor
        self._new_velocity[key] = u_new
        return v, u_new

    def compensate(self, tensor, key):
        v, u_new = self._velocity_step(tensor, key)
        return v + u_new

    def compensate_within(self, tensor, key, limit):
        # compensate() with the range check in the same pass as v + u_new
        # (ResidualMemory's one-pass form would skip the velocity).
        v, u_new = self._velocity_step(tensor, key)
        return fusion_ops.add_within(v, u_new, limit)

    def update(self, key, compensated, decoded, keep=None):
        # The positions that were sent are not known here: no masking.
        none = (tf.zeros([0], tf.int64), tf.zeros([0], compensated.dtype))
        return self.update_sent(key, compensated, Sent(compensated - decoded, *none), keep)

    def update_sent(self, key, compensated, sent, keep=None):
        u_new = self._new_velocity.pop(key, None)
        if u_new is None:
            raise RuntimeError(f"momentum correction: update of {key!r} without its "
                               "compensate() in the same step")
        u = self.velocity(key, compensated)
        masked = fusion_ops.scatter_subtract(u_new, sent.positions,
                                             fusion_ops.gather(u_new, sent.positions))
        if keep is None:
            new_u = masked
        else:  # a NaN/Inf step leaves the velocity as it was, like the residual
            new_u = tf.cond(keep, u.read_value, lambda: masked)
        with tf.control_dependencies([u.assign(new_u, read_value=False)]):
            return super().update_sent(key, compensated, sent, keep)


MEMORIES = collections.OrderedDict((c.name_, c) for c in (NoMemory, ResidualMemory,
                                                          MomentumCorrectionMemory))


def make_memory(name, **kwargs):
    if name not in MEMORIES:
        raise ValueError(f"unknown memory {name!r}; valid choices: {', '.join(MEMORIES)}")
    return MEMORIES[name](**kwargs)
