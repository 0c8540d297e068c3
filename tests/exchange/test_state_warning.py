"""A run whose exchange keeps state between steps, and whose checkpoints
would not carry it, is told so once (StateNotSavedWarning naming the fix);
a run that saves the state, or keeps none, is not."""
import warnings

import numpy as np
import pytest
import tensorflow as tf

from deepreduce_tf import distribute as drd

DEVICES = ["/cpu:0", "/cpu:1"]
STATEFUL = {"compressor": "topk", "compress_ratio": 0.05, "memory": "residual",
            "deepreduce": "index", "index": "golomb", "min_size": 16}


def _step(ops):
    lists = []
    for r, d in enumerate(DEVICES):
        with tf.device(d):
            lists.append([tf.constant(np.arange(64, dtype=np.float32) * (r + 1))])
    return ops.reduce_tensors(lists)


def _warnings_of(ops, steps=2):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            _step(ops)
    return [w for w in caught if issubclass(w.category, drd.StateNotSavedWarning)]


def test_unsaved_state_warns_once_and_names_the_fix():
    got = _warnings_of(drd.DeepReduceCrossDeviceOps(STATEFUL))
    assert len(got) == 1
    text = str(got[0].message)
    assert "KerasState(ops)" in text and "deepreduce=ops.state" in text
    assert "BackupAndRestore" in text


def test_keras_state_or_a_checkpoint_silences_it(tmp_path):
    ops = drd.DeepReduceCrossDeviceOps(STATEFUL)
    drd.KerasState(ops)
    assert not _warnings_of(ops)
    ops = drd.DeepReduceCrossDeviceOps(STATEFUL)
    ckpt = tf.train.Checkpoint(deepreduce=ops.state)
    ckpt.restore(ckpt.write(str(tmp_path / "ckpt")))  # before the first step, as documented
    assert not _warnings_of(ops)


@pytest.mark.parametrize("params", [{"compressor": "none"},
                                    {"compressor": "none", "value": "fp16",
                                     "deepreduce": "value", "communicator": "allreduce"}])
def test_a_stateless_exchange_does_not_warn(params):
    assert not _warnings_of(drd.DeepReduceCrossDeviceOps(params))
