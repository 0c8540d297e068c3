"""Keras and TensorBoard hooks of DeepReduce's cross-device ops
(deepreduce_tf.distribute re-exports them): KerasState saves the exchange's
state with the model's weights, BytesCallback logs the bytes of every batch,
write_scalar writes a scalar summary without the tensorboard package.
"""

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from deepreduce_tf.integrations.replica_state import _DeepReduceState, get_ops
from deepreduce_tf.state import ExchangeState


def KerasState(ops):  # pylint: disable=invalid-name
    """A Keras layer that saves `ops`' state (DeepReduceCrossDeviceOps,
    DeepReduceCollectiveOps or a strategy using them) with the model's
    weights. Attach it as an attribute of the model:

        model.deepreduce = deepreduce_tf.distribute.KerasState(ops)

    It holds no Keras weights and takes no part in the model's computation;
    save_weights / load_weights (hence BackupAndRestore and ModelCheckpoint)
    call its save_own_variables / load_own_variables.
    """
    if isinstance(ops, tf.distribute.Strategy):
        ops = get_ops(ops)
    if not isinstance(getattr(ops, "state", None), ExchangeState):
        raise TypeError(f"KerasState needs DeepReduce ops or a strategy using them, got {ops!r}")
    state = ops.state
    state.mark_saved("keras")

    class _KerasState(tf.keras.layers.Layer):
        def __init__(self):
            super().__init__(name="deepreduce_state", trainable=False)
            self.exchange_state = state  # tracked: tf.train.Checkpoint(model=...) holds it
            self.built = True

        def call(self, inputs):  # never part of the model's graph
            raise TypeError("KerasState is not a computation layer: attach it as an attribute "
                            "of the model (model.deepreduce = KerasState(ops))")

        def save_own_variables(self, store):
            for name, value in sorted(state.values().items()):
                store[name] = value

        def load_own_variables(self, store):
            state.load_values({name: store[name] for name in store.keys()})

    return _KerasState()


def write_scalar(name, value, step):
    """tf.summary.scalar without the tensorboard package (which
    tensorflow-cpu does not bring): a scalar summary TensorBoard shows."""
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    return tf.summary.write(name, tf.cast(value, tf.float32), step=step, metadata=meta)


def BytesCallback(ops, log_dir=None, prefix="deepreduce"):  # pylint: disable=invalid-name
    """A Keras callback (Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1)
    that adds, after every training batch, `sent_bytes`, `dense_bytes` (per
    replica, this batch's exchanges) and `reduction` (dense / sent) to the
    batch logs, keeps them in callback.history, and, with log_dir, writes
    them as TensorBoard scalars `{prefix}/sent_bytes`, ... per step.

    ops: DeepReduceCrossDeviceOps / DeepReduceCollectiveOps, or a strategy.
    """
    if isinstance(ops, tf.distribute.Strategy):
        ops = get_ops(ops)
    if not isinstance(ops, _DeepReduceState):
        raise TypeError(f"BytesCallback needs DeepReduce ops or a strategy using them, got {ops!r}")
    base = tf.keras.callbacks.Callback

    class _BytesCallback(base):
        def __init__(self):
            super().__init__()
            self.ops = ops
            self.history = []
            self._last = None
            self._writer = tf.summary.create_file_writer(log_dir) if log_dir else None
            self._step = 0

        def on_train_begin(self, logs=None):
            self._last = self.ops.totals()

        def on_train_batch_end(self, batch, logs=None):
            now = self.ops.totals()
            last = self._last or {"dense_bytes": 0, "sent_bytes": 0}
            sent = now["sent_bytes"] - last["sent_bytes"]
            dense = now["dense_bytes"] - last["dense_bytes"]
            self._last = now
            row = {"sent_bytes": sent, "dense_bytes": dense,
                   "reduction": dense / sent if sent else 0.0}
            self.history.append(row)
            if logs is not None:
                logs.update(row)
            if self._writer is not None:
                with self._writer.as_default():
                    for key, val in row.items():
                        write_scalar(f"{prefix}/{key}", val, self._step)
            self._step += 1

        def on_train_end(self, logs=None):
            if self._writer is not None:
                self._writer.flush()

    return _BytesCallback()
