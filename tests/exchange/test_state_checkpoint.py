"""The exchange's state (residuals, seed and byte counters) is saved and
restored with the training: tf.train.Checkpoint built before training, Keras
save_weights / load_weights, and BackupAndRestore across a killed process.
A resumed run must continue bit for bit like the uninterrupted one."""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from deepreduce_tf import distribute as drd

# Trains models, starts worker processes or runs Flower (minutes):
# `pytest -m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICES = ["/cpu:0", "/cpu:1"]
# The recommended configuration: top-k 1 % + residual, golomb, QSGD (seeded).
PARAMS = {"compressor": "topk", "compress_ratio": 0.01, "memory": "residual",
          "deepreduce": "both", "index": "golomb", "value": "qsgd", "quantum_num": 127}


def _data(seed=7, n=128):
    rng = np.random.RandomState(seed)
    return rng.randn(n, 32).astype(np.float32), rng.randint(0, 10, n)


def _setup(params=PARAMS):
    """Model, optimizer, ops and a compiled step, as a fresh process makes them."""
    ops = drd.DeepReduceCrossDeviceOps(params)
    strategy = tf.distribute.MirroredStrategy(DEVICES, cross_device_ops=ops)
    with strategy.scope():
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        opt = keras.optimizers.SGD(0.05, momentum=0.9)
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=32)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def step(x, y):
        strategy.run(replica_step, args=(x, y))

    x, y = _data()

    def run(first, count):
        for s in range(first, first + count):
            # Each replica its own 16 rows of batch s.
            xs = strategy.experimental_distribute_values_from_function(
                lambda ctx, s=s: x[32 * s + 16 * ctx.replica_id_in_sync_group:][:16])
            ys = strategy.experimental_distribute_values_from_function(
                lambda ctx, s=s: y[32 * s + 16 * ctx.replica_id_in_sync_group:][:16])
            step(xs, ys)

    return ops, model, opt, run


def _weights(model):
    return [w.numpy() for w in model.weights]


def _assert_same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


POWERSGD = {"compressor": "powersgd", "rank": 2, "start_iter": 1}
# Every method resumes from what it declares (Exchange.state_declaration):
# LGC through its three phases (the checkpoint falls between phase 2 and the
# weight broadcast of phase 3), DGC's velocities, the all-reduce's seeds.
LGC = {"compressor": "topk", "compress_ratio": 0.05, "memory": "residual",
       "lgc_warmup_steps": 1, "lgc_train_steps": 1, "lgc_channels": "4,8,16,32"}
METHODS = {"golomb_qsgd": PARAMS, "powersgd": POWERSGD,
           "lgc_ps": dict(LGC, communicator="lgc_ps"),
           "lgc_rar": dict(LGC, communicator="lgc_rar"),
           "dgc": dict(PARAMS, memory="dgc"),
           # The schedule's factor follows the step counters: restored, the
           # resumed steps are scaled as the uninterrupted ones.
           "dgc_schedule": dict(PARAMS, memory="dgc", schedule="cosine", schedule_steps=6),
           "randomk_allreduce": {"compressor": "randomk", "compress_ratio": 0.1,
                                 "memory": "residual", "communicator": "allreduce"}}


@pytest.mark.parametrize("params", list(METHODS.values()), ids=list(METHODS))
def test_checkpoint_built_before_training_resumes_bit_for_bit(tmp_path, params):
    ops, model, opt, run = _setup(params)
    run(0, 4)
    want = _weights(model)
    want_state = ops.state.values()
    assert any(k.endswith("residuals|" + k.rsplit("|", 1)[-1]) for k in want_state)

    # Interrupted: 2 steps, saved by a checkpoint made before training ...
    ops1, model1, opt1, run1 = _setup(params)
    ckpt = tf.train.Checkpoint(model=model1, optimizer=opt1, deepreduce=ops1.state)
    assert ops1.compressors == []  # nothing exists yet: the state is created by the step
    run1(0, 2)
    path = ckpt.save(str(tmp_path / "ckpt"))
    residual_names = [k for k in ops1.state.values() if "residuals" in k]
    assert residual_names and any(
        np.abs(ops1.state.values()[k]).sum() > 0 for k in residual_names)

    # ... and resumed in fresh objects: restore BEFORE the first step.
    ops2, model2, opt2, run2 = _setup(params)
    tf.train.Checkpoint(model=model2, optimizer=opt2, deepreduce=ops2.state).restore(
        path).assert_existing_objects_matched()
    run2(2, 2)
    _assert_same(_weights(model2), want)
    got_state = ops2.state.values()
    assert sorted(got_state) == sorted(want_state)
    for k in want_state:
        np.testing.assert_array_equal(got_state[k], want_state[k], err_msg=k)
    assert ops2.totals()["steps"] == 4

    # Control: the same resume without the DeepReduce state is NOT the same
    # run (the residuals carry half of what top-k held back).
    ops3, model3, opt3, run3 = _setup(params)
    tf.train.Checkpoint(model=model3, optimizer=opt3).restore(path).expect_partial()
    run3(2, 2)
    assert any(not np.array_equal(a, b) for a, b in zip(_weights(model3), want))


def test_keras_weights_hold_the_state_and_load_before_the_first_step(tmp_path):
    x, y = _data()

    def fit(ops, model, epochs):
        model.fit(x, y, batch_size=32, epochs=epochs, shuffle=False, verbose=0)

    def make():
        ops = drd.DeepReduceCrossDeviceOps(PARAMS)
        strategy = tf.distribute.MirroredStrategy(DEVICES, cross_device_ops=ops)
        with strategy.scope():
            keras.utils.set_random_seed(3)
            model = keras.Sequential([keras.Input((32,)),
                                      keras.layers.Dense(64, activation="relu"),
                                      keras.layers.Dense(10)])
            model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.deepreduce = drd.KerasState(ops)
        return ops, model, strategy

    ops, model, _ = make()
    fit(ops, model, 2)
    want, want_state = _weights(model), ops.state.values()

    ops1, model1, _ = make()
    fit(ops1, model1, 1)
    path = str(tmp_path / "one_epoch.weights.h5")
    model1.save_weights(path)

    ops2, model2, strategy2 = make()
    with strategy2.scope():  # what BackupAndRestore does before loading
        model2.optimizer.build(model2.trainable_variables)
    model2.load_weights(path)
    # Nothing exists yet: the values wait for their variables, by name, and
    # saving now loses none of them.
    assert ops2.state.pending == sorted(ops1.state.values())
    again = str(tmp_path / "again.weights.h5")
    model2.save_weights(again)
    ops3, model3, strategy3 = make()
    with strategy3.scope():
        model3.optimizer.build(model3.trainable_variables)
    model3.load_weights(again)
    assert ops3.state.pending == ops2.state.pending

    fit(ops2, model2, 1)
    assert ops2.state.pending == []
    _assert_same(_weights(model2), want)
    got_state = ops2.state.values()
    for k in want_state:
        np.testing.assert_array_equal(got_state[k], want_state[k], err_msg=k)


def test_loaded_state_of_another_configuration_is_refused(tmp_path):
    ops, model, opt, run = _setup()
    run(0, 1)
    values = ops.state.values()
    name = next(k for k in values if "residuals" in k)
    values[name] = np.zeros(3, values[name].dtype)
    ops2, model2, opt2, run2 = _setup()
    ops2.state.load_values(values)
    with pytest.raises(ValueError, match="different model or compression configuration"):
        run2(0, 1)


def test_keras_state_needs_deepreduce_ops():
    with pytest.raises(ValueError, match="does not use DeepReduce"):
        drd.KerasState(tf.distribute.OneDeviceStrategy("/cpu:0"))
    with pytest.raises(TypeError, match="KerasState needs DeepReduce ops"):
        drd.KerasState({"compressor": "topk"})


def _worker(spec, tmp_path, name, expect_killed=False):
    out = str(tmp_path / f"{name}.npz")
    body = dict(spec, out=out)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "state_worker.py"),
                           json.dumps(body)], cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=300)
    if expect_killed:
        assert proc.returncode == -9, proc.stderr[-3000:]
        assert not os.path.exists(out)
        return None
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


def test_backup_and_restore_resumes_a_killed_process_bit_for_bit(tmp_path):
    spec = {"params": PARAMS, "epochs": 3}
    want = _worker(spec, tmp_path, "uninterrupted")
    backup = str(tmp_path / "backup")
    killed = dict(spec, backup_dir=backup, kill_at_epoch=2)
    _worker(killed, tmp_path, "killed", expect_killed=True)
    assert os.listdir(backup)  # the epoch-1 backup survived the kill
    got = _worker(dict(spec, backup_dir=backup), tmp_path, "resumed")
    assert sorted(got) == sorted(want)
    assert any(k.startswith("state:") and "residuals" in k for k in want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
