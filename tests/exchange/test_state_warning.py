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


@pytest.mark.parametrize("params", [
    # PowerSGD without error feedback still keeps Q (warm start) and its step count.
    {"compressor": "powersgd", "rank": 1, "memory": "none", "min_size": 16},
    {"compressor": "topk", "compress_ratio": 0.05, "communicator": "lgc_ps", "memory": "none",
     "lgc_warmup_steps": 1, "lgc_train_steps": 1, "lgc_channels": "4,8,16,32", "min_size": 16},
])
def test_state_a_communicator_declares_warns_too(params):
    """The warning follows what each part declares (Exchange.state_declaration),
    not the memory alone: PowerSGD's Q and LGC's autoencoder are state."""
    import deepreduce_tf as dr

    owners = {owner for owner, _ in dr.from_params(params).state_declaration()}
    assert "communicator" in owners and "memory" not in owners
    assert len(_warnings_of(drd.DeepReduceCrossDeviceOps(params))) == 1


def test_what_each_part_declares():
    import deepreduce_tf as dr

    decl = dr.from_params(dict(STATEFUL, memory="dgc")).state_declaration()
    assert [(o, v.name) for o, v in decl] == [("memory", "residual"), ("memory", "velocity"),
                                              ("memory", "dense_velocity"), ("ledger", "bytes")]
    decl = dr.from_params({"compressor": "randomk", "compress_ratio": 0.1,
                           "memory": "none"}).state_declaration()
    assert [(o, v.name) for o, v in decl] == [("exchange", "step"), ("ledger", "bytes")]
    decl = dr.from_params({"compressor": "powersgd", "warm_start": False}).state_declaration()
    assert [(o, v.name) for o, v in decl if o != "memory"] == [("exchange", "step"),
                                                               ("ledger", "bytes")]
    assert not dr.from_params({"compressor": "none"}).keeps_state


def test_a_memory_of_your_own_is_state_unless_it_says_otherwise():
    import deepreduce_tf as dr

    class Halving(dr.memory.Memory):  # declares nothing: assumed to keep state
        def compensate(self, tensor, key):
            return tensor

        def update(self, key, compensated, decoded, keep=None):
            return None

    ex = dr.make_exchange(dr.sparsifiers.TopK(0.1), memory=Halving())
    assert ex.keeps_state and ("memory", Halving.STATE[0]) in ex.state_declaration()
    plain = dr.make_exchange(dr.sparsifiers.TopK(0.1), memory=dr.memory.NoMemory())
    assert not plain.keeps_state


def test_the_communicator_changes_only_before_the_first_step():
    import deepreduce_tf as dr
    from deepreduce_tf import communicators

    ex = dr.from_params({"compressor": "powersgd", "rank": 1})
    other = communicators.PowerSGD(rank=1)
    ex.reconfigure(communicator=other)  # before any step: fine
    assert ex.communicator is other
    communicators.exchange_locally([ex], [tf.ones([64, 32])], name="w")
    with pytest.raises(RuntimeError, match="has run steps"):
        ex.reconfigure(communicator=communicators.PowerSGD(rank=1))
