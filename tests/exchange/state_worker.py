"""Keras training with DeepReduce under MirroredStrategy (2 logical CPUs),
killed and resumed, for tests/exchange/test_state_checkpoint.py.

    python state_worker.py SPEC_JSON

SPEC_JSON: {"params": {...}, "epochs": N, "backup_dir": "dir" or null,
            "kill_at_epoch": E or null, "out": "path.npz"}

With backup_dir, keras.callbacks.BackupAndRestore saves after every epoch
(and restores when the directory holds a backup); kill_at_epoch sends this
process SIGKILL when epoch E (0-based) begins, after the backup of epoch
E - 1 was written: nothing gets a chance to clean up. At the end, `out` gets
every model weight (w0, w1, ...) and the DeepReduce state by name.
"""
import json
import os
import signal
import sys


def main():
    spec = json.loads(sys.argv[1])
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras

    from deepreduce_tf import distribute as drd

    ops = drd.DeepReduceCrossDeviceOps(spec["params"])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=ops)
    rng = np.random.RandomState(7)
    x = rng.randn(128, 32).astype(np.float32)
    y = rng.randint(0, 10, 128)
    with strategy.scope():
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.deepreduce = drd.KerasState(ops)
    callbacks = []
    if spec.get("backup_dir"):
        callbacks.append(keras.callbacks.BackupAndRestore(spec["backup_dir"]))
    kill_at = spec.get("kill_at_epoch")
    if kill_at is not None:
        class Kill(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                if epoch == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

        callbacks.append(Kill())
    model.fit(x, y, batch_size=32, epochs=spec["epochs"], shuffle=False, verbose=0,
              callbacks=callbacks)
    arrays = {f"w{i}": w.numpy() for i, w in enumerate(model.weights)}
    arrays.update({f"state:{k}": v for k, v in ops.state.values().items()})
    np.savez(spec["out"], **arrays)


if __name__ == "__main__":
    sys.exit(main())
