"""What the exchange keeps between steps, in checkpoints: residuals, seed
counters, byte counters and the communicator's own state (PowerSGD's Q,
LGC's autoencoder) of every replica's exchange, as each part declares it
(Exchange.state_declaration).

The state is created lazily, on the first step (its shapes are those of the
fused buckets the first step sees), but its container exists from the start:
ops.state, a tf.Module. Two ways to save and restore it with the training:

  * tf.train.Checkpoint(model=model, optimizer=opt, deepreduce=ops.state),
    built BEFORE training: restore() before the first step is deferred, and
    every variable takes its saved value the moment the first step creates it
    (TensorFlow's restore-on-create).
  * Keras: attach a KerasState layer (deepreduce_tf.distribute) to the model,
        model.deepreduce = deepreduce_tf.distribute.KerasState(ops)
    and model.save_weights / load_weights, keras.callbacks.BackupAndRestore
    and ModelCheckpoint(save_weights_only=True) save and restore it with the
    weights (and tf.train.Checkpoint(model=model) holds it too). Values
    loaded before the first step wait, by name, until the step creates
    their variable.

Either way a resumed run continues bit for bit like an uninterrupted one
(same data order assumed). Under MultiWorkerMirroredStrategy every worker
keeps its own residuals: each worker must save to and restore from its own
path (e.g. one directory per task index).
"""
import urllib.parse

import numpy as np
import tensorflow as tf

# What a state variable's name looks like in a Keras weights file: the
# tf.Module path, each element percent-encoded, joined by "|" (H5 would take
# "/" for groups).
_SEP = "|"


def _encode(path):
    return _SEP.join(urllib.parse.quote(str(p), safe="") for p in path)


class ExchangeState(tf.Module):
    """The per-replica exchanges and exchange counters of one ops object.

    compressors, exchanges and collective_bytes map the local replica number
    (as a string, a checkpoint key) to its Exchange / int64 counter.
    """

    def __init__(self, name="deepreduce_state"):
        super().__init__(name=name)
        self.compressors = {}
        self.exchanges = {}
        self.collective_bytes = {}
        # Values loaded (by KerasState) before their variable exists: name ->
        # numpy array. Not a checkpoint dependency itself.
        object.__setattr__(self, "_pending", {})
        # How the state is saved ("keras", "checkpoint"): empty until a
        # KerasState is made for it or a checkpoint reads its dependencies.
        object.__setattr__(self, "_saved_by", set())

    @property
    def saved_by(self):
        """How this state is saved: {"keras"} once a KerasState holds it,
        {"checkpoint"} once a tf.train.Checkpoint saved or restored it."""
        return frozenset(self._saved_by)

    def mark_saved(self, how):
        self._saved_by.add(how)

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # A checkpoint (save, restore, deferred restore) asks for the state's
        # children: from then on it travels with the checkpoint.
        self._saved_by.add("checkpoint")
        return super()._trackable_children(save_type, **kwargs)

    def named_variables(self):
        """{name: variable} of every state variable that exists, names stable
        across processes (the module path of the variable)."""
        found = self._flatten(with_path=True,
                              predicate=lambda v: isinstance(v, tf.Variable))
        return {_encode(path): var for path, var in found}

    def values(self):
        """{name: numpy array} of the state, values still waiting for their
        variable included (so that saving right after a restore loses
        nothing)."""
        out = dict(self._pending)
        out.update({k: v.numpy() for k, v in self.named_variables().items()})
        return out

    def load_values(self, values):
        """Assigns saved values by name: at once to variables that exist, the
        rest as soon as a step creates them (apply_pending). A shape or dtype
        that differs from the variable's raises ValueError."""
        self._pending.clear()
        self._pending.update({str(k): np.asarray(v) for k, v in values.items()})
        self.apply_pending()

    @property
    def pending(self):
        """Names of loaded values whose variable does not exist yet."""
        return sorted(self._pending)

    def apply_pending(self):
        """Assigns the pending values whose variables exist now (eagerly: call
        it outside a traced function or under tf.init_scope)."""
        if not self._pending:
            return
        with tf.init_scope():
            for name, var in self.named_variables().items():
                value = self._pending.get(name)
                if value is None:
                    continue
                if tuple(value.shape) != tuple(var.shape) or value.dtype != var.dtype.as_numpy_dtype:
                    raise ValueError(
                        f"deepreduce state {name!r}: the saved value is {value.dtype} "
                        f"{tuple(value.shape)}, this run creates {var.dtype.name} "
                        f"{tuple(var.shape)}: the checkpoint was written by a different model "
                        "or compression configuration; restore it with the same ones, or do "
                        "not restore the deepreduce state")
                var.assign(value)
                del self._pending[name]
