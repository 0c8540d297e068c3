"""DeepReduceCrossDeviceOps under a MirroredStrategy of ONE replica: TensorFlow
reduces one replica's values without calling the cross-device ops, so
nothing is compressed. The ops say so, once, with a SingleReplicaWarning
(the test process has two logical CPUs, see conftest: a strategy on
"/cpu:0" alone has one replica, on both it has two)."""
import warnings

import numpy as np
import pytest
import tensorflow as tf

from deepreduce_tf import distribute as drd

PARAMS = {"compressor": "topk", "compress_ratio": 0.05, "deepreduce": "index",
          "index": "golomb", "min_size": 16}


def _fit(devices, epochs=2):
    """The README's flow: ops, MirroredStrategy, Keras fit with BytesCallback.
    Returns (ops, strategy, callback, the SingleReplicaWarnings recorded)."""
    import keras

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops = drd.DeepReduceCrossDeviceOps(PARAMS)
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
        with strategy.scope():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                                      keras.layers.Dense(2)])
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        x = np.random.RandomState(0).randn(32, 8).astype(np.float32)
        y = x[:, :2] * 2
        cb = drd.BytesCallback(ops)
        model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, callbacks=[cb])
        ops.step_bytes()
    return ops, strategy, cb, [w for w in caught if issubclass(w.category,
                                                              drd.SingleReplicaWarning)]


def test_one_replica_warns_once_and_says_how_to_get_two():
    ops, strategy, cb, caught = _fit(["/cpu:0"])
    assert strategy.num_replicas_in_sync == 1
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert issubclass(caught[0].category, RuntimeWarning)
    msg = str(caught[0].message)
    assert "single replica" in msg and "nothing is compressed" in msg
    assert "tf.config.set_logical_device_configuration(cpu, " in msg
    assert "[tf.config.LogicalDeviceConfiguration()] * 2" in msg
    assert 'MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=ops)' in msg
    # What the warning explains: the counters were never fed.
    assert ops.compressors == []
    assert ops.step_bytes()["sent_bytes"] == 0
    assert len(cb.history) == 4 and all(row["sent_bytes"] == 0 for row in cb.history)
    # Further skipped reductions of the same ops stay silent.
    value = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.ones([64]))
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        out = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, [(value, value)])
    np.testing.assert_array_equal(strategy.experimental_local_results(out[0])[0].numpy(),
                                  np.ones(64, np.float32))
    assert not [w for w in later if issubclass(w.category, drd.SingleReplicaWarning)]


def test_an_eager_batch_reduce_to_warns():
    with pytest.warns(drd.SingleReplicaWarning, match="single replica"):
        ops = drd.DeepReduceCrossDeviceOps(PARAMS)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"], cross_device_ops=ops)
        value = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.ones([64]))
        strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, [(value, value)])


def test_two_replicas_compress_and_do_not_warn():
    ops, strategy, cb, caught = _fit(["/cpu:0", "/cpu:1"], epochs=1)
    assert strategy.num_replicas_in_sync == 2
    assert caught == []
    assert len(ops.compressors) == 2
    assert len(cb.history) == 2 and all(row["sent_bytes"] > 0 for row in cb.history)
    step = ops.step_bytes()
    assert 0 < step["sent_bytes"] < step["dense_bytes"]
