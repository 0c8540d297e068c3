"""CollectiveTransport's fixed-capacity frames (one collective per exchange in
the steady state, a second for overflow), against a launcher that records
every collective. Group of one worker (the gather returns its input); the
multi-worker runs of tests/test_distribute.py exercise the real collectives."""
import numpy as np
import tensorflow as tf

from deepreduce_tf.transport import CollectiveTransport


class RecordingLauncher:
    def __init__(self):
        self.sizes = []  # int32 words per collective, eagerly

    def _all_gather(self, tensor, options=None):  # pylint: disable=unused-argument
        if tf.executing_eagerly():
            self.sizes.append(int(tf.size(tensor)))
        return tf.identity(tensor)


def test_frames_one_collective_once_the_capacity_fits():
    launcher = RecordingLauncher()
    capacity = tf.Variable(0, dtype=tf.int32)
    wire = tf.Variable(0, dtype=tf.int64)
    rng = np.random.default_rng(0)
    lengths = [1000, 1003, 990, 1200, 1100, 13, 0, 40]
    expected_cap, per_step = 0, []
    for length in lengths:
        payload = rng.integers(0, 256, size=length, dtype=np.uint8)
        before = len(launcher.sizes)
        transport = CollectiveTransport(launcher, "/cpu:0", 1, None, wire,
                                        frames=lambda key: capacity)
        (got,) = transport.all_gather([tf.constant(payload)], key="batch")
        np.testing.assert_array_equal(got.numpy(), payload)
        need = (length + 3) // 4
        calls = launcher.sizes[before:]
        assert calls[0] == 1 + expected_cap  # the frame: length word + capacity
        if need > expected_cap:
            assert calls[1:] == [need - expected_cap]  # the overflow, only then
        else:
            assert len(calls) == 1
        per_step.append(len(calls))
        expected_cap = need + need // 256 + 8
        assert int(capacity.numpy()) == expected_cap
    # first step overflows (capacity 0); 1003 B fits 1000 B's margin; 1200 B does
    # not; after an empty payload (capacity 8 words) 40 B overflow again
    assert per_step == [2, 1, 1, 2, 1, 1, 1, 2]
    assert int(wire.numpy()) == 4 * sum(launcher.sizes)


def test_frames_in_a_tf_function_match_the_payloads():
    launcher = RecordingLauncher()
    capacity = tf.Variable(0, dtype=tf.int32)

    @tf.function
    def exchange(payload):
        transport = CollectiveTransport(launcher, "/cpu:0", 1, None,
                                        frames=lambda key: capacity)
        (got,) = transport.all_gather([payload], key="batch")
        return got

    rng = np.random.default_rng(1)
    for length in [50, 400, 37, 401, 2000]:
        payload = rng.integers(0, 256, size=length, dtype=np.uint8)
        np.testing.assert_array_equal(exchange(tf.constant(payload)).numpy(), payload)
        need = (length + 3) // 4
        assert int(capacity.numpy()) == need + need // 256 + 8
