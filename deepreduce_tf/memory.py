"""Error-feedback memory (GRACE's Memory): what was not sent is kept.

  none      nothing is kept.
  residual  per variable, r <- (beta * r + gamma * g) - decoded, where decoded
            is exactly what the receivers decode from the payload. With
            beta = gamma = 1 (the default) nothing is lost: over T steps
            sum(decoded) + r_T = sum(g), to float rounding.

The residual of each variable is a non-trainable tf.Variable created lazily on
the first compress of that variable (eagerly or inside tf.function: creation
is lifted out by _variables.state_scope, and a tf.function around the step
traces once). Memory objects are tf.Modules, so a tf.train.Checkpoint that
holds them (or the compressor) saves the residuals; restoring before the
variables exist is deferred until they are created
(see deepreduce_tf.state for the exchange's state as a whole).
"""
import abc
import collections
import re
import sys

import tensorflow as tf

from deepreduce_tf._variables import (StateVar, default_variable_factory,  # noqa: F401
                                      ensure_initialized, state_scope)
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

    # A fused bucket's dense section (its tensors below min_size) travels as
    # it is, without error feedback. Memory that changes what an optimizer
    # step means (DGC's momentum correction) applies itself there too.
    def dense_variables(self, key, like):
        """The variables of the dense section of `key` (created, shaped like
        `like`, on first use)."""
        return []

    def compensate_dense(self, tensor, key):
        """What the dense section `tensor` of `key` sends: itself."""
        return tensor

    def update_dense(self, key, keep=None):
        """Stores the state of the dense section sent by this step's
        compensate_dense(); keep: as update(). Returns the op (or None)."""
        return None


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
            with state_scope():  # tracked eagerly: a deferred restore assigns at once
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
        return _store_unless_kept(self.residual(key, like=compensated), key, new_residual, keep)


def _store_unless_kept(var, key, new_value, keep, what="residual",
                       lost="the error feedback of earlier steps", read_value=True):
    """var <- new_value(), or, where keep (a bool scalar, None: never) is
    True, var as it was; a kept value that is not finite (restored from an
    old run, say) would poison every later step: it is reset, with a
    warning."""
    if keep is None:
        return var.assign(new_value(), read_value=read_value)

    def kept():
        old = var.read_value()
        return tf.cond(tf.reduce_all(tf.math.is_finite(old)), lambda: old,
                       lambda: _reset(key, old, what, lost))

    return var.assign(tf.cond(keep, kept, new_value), read_value=read_value)


def _reset(key, residual, what="residual", lost="the error feedback of earlier steps"):
    """Zeros for a non-finite residual, with a warning on stderr."""
    warn = tf.print(f"deepreduce_tf: WARNING: the {what} of {key!r} held NaN or Inf; it is "
                    f"reset to zero ({lost} is lost)",
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
    step is exactly one step of momentum SGD. A bucket's dense section (the
    tensors below min_size: biases, batch norm) has a velocity of its own
    and sends it, u <- m u + g, which is momentum SGD for those tensors
    (without it they would train with plain SGD). With m = 0 this is
    ResidualMemory.

    masking=False keeps u where a value was sent (DGC's correction without
    its factor masking): the values sent add up, over the steps, to what
    momentum SGD applies (sum of the velocities), each one late by its
    stay in v; a position sent every step then has momentum SGD's step, not
    plain SGD's, which masking gives it.
    """

    name_ = "dgc"
    STATE = ResidualMemory.STATE + (
        StateVar("velocity", "gradient", "the bucket's sparse section", "bucket"),
        StateVar("dense_velocity", "gradient", "the bucket's dense section (small tensors)",
                 "bucket"))

    def __init__(self, momentum=0.9, variable_factory=None, name=None, masking=True):
        super().__init__(variable_factory=variable_factory, name=name)
        momentum = float(momentum)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum!r}")
        if not isinstance(masking, bool):
            raise ValueError(f"momentum_masking must be True or False, got {masking!r}")
        self.momentum = momentum
        self.masking = bool(masking)
        self.velocities = {}
        self.dense_velocities = {}
        # compensate() -> the new velocity, which update_sent() masks and
        # stores (both run in the same step's graph); compensate_dense() ->
        # the dense section's, which update_dense() stores.
        object.__setattr__(self, "_new_velocity", {})
        object.__setattr__(self, "_new_dense_velocity", {})

    def config(self):
        out = {"momentum": self.momentum}
        if not self.masking:
            out["momentum_masking"] = False
        return out

    def velocity(self, key, like):
        return self._velocity_var(self.velocities, "velocity", key, like)

    def dense_velocity(self, key, like):
        """The velocity of the dense section of `key` (its small tensors)."""
        return self._velocity_var(self.dense_velocities, "dense_velocity", key, like)

    def _velocity_var(self, table, kind, key, like):
        var = table.get(key)
        if var is None:
            with state_scope():
                var = self._factory(tf.zeros(like.shape, like.dtype),
                                    f"{kind}/{_slot_name(key)}")
                table[key] = var
        elif var.shape != like.shape or var.dtype != like.dtype:
            raise ValueError(f"momentum correction: {key!r} was first seen as {var.dtype.name} "
                             f"{var.shape}, now {like.dtype.name} {like.shape}; use one key "
                             "per variable")
        return var

    def dense_variables(self, key, like):
        return [self.dense_velocity(key, like)]

    def compensate_dense(self, tensor, key):
        u_new = tf.cast(self.momentum, tensor.dtype) * self.dense_velocity(key, tensor) + tensor
        self._new_dense_velocity[key] = u_new
        return u_new

    def update_dense(self, key, keep=None):
        u_new = self._new_dense_velocity.pop(key, None)
        if u_new is None:
            return None
        return _store_unless_kept(self.dense_velocity(key, u_new), key, lambda: u_new, keep,
                                  "dense section's velocity", "its momentum", read_value=False)

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
        if self.masking:
            masked = fusion_ops.scatter_subtract(u_new, sent.positions,
                                                 fusion_ops.gather(u_new, sent.positions))
        else:
            masked = u_new
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
