"""CollectiveTransport's fixed-capacity frames (one collective per exchange in
the steady state, a second for overflow), against a launcher that records
every collective. Group of one worker (the gather returns its input); the
multi-worker runs of tests/integrations/test_distribute.py exercise the real
collectives."""
import numpy as np
import pytest
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


def test_parts_travel_in_one_gather_and_come_back_exactly():
    from deepreduce_tf.transport import LocalTransport

    rng = np.random.default_rng(2)
    devices = ["/cpu:0", "/cpu:1"]
    sizes = [[5, 0, 300], [17, 1, 0]]  # per device: three parts, some empty
    parts = [[tf.constant(rng.integers(0, 256, size=n, dtype=np.uint8)) for n in row]
             for row in sizes]
    transport = LocalTransport(devices)
    got = transport.all_gather_parts(parts)
    for j in range(3):
        for r in range(2):
            np.testing.assert_array_equal(got[j][r].numpy(), parts[r][j].numpy())
    with pytest.raises(ValueError, match="same, non-zero number of parts"):
        transport.all_gather_parts([parts[0], parts[1][:2]])


class TamperingTransport:
    """A LocalTransport whose gathered frames lose their last byte or
    are cut inside the lengths header."""

    @staticmethod
    def make(cut):
        from deepreduce_tf.transport import LocalTransport

        class Tampered(LocalTransport):
            def all_gather(self, payloads, key=None):
                return [p[:cut(p)] for p in super().all_gather(payloads, key)]

        return Tampered(["/cpu:0"])


@pytest.mark.parametrize("cut,message", [
    (lambda p: tf.size(p) - 1, "part lengths do not add up to its size"),
    (lambda p: 3, "shorter than its 2 part lengths"),
])
def test_a_damaged_frame_of_parts_is_an_error_that_says_so(cut, message):
    transport = TamperingTransport.make(cut)
    parts = [[tf.constant([1, 2, 3], tf.uint8), tf.constant([4], tf.uint8)]]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        got = transport.all_gather_parts(parts)
        [t.numpy() for row in got for t in row]


def test_a_batch_and_its_slices_are_one_collective():
    """Allgather.step_all: the batch payload and every tf.IndexedSlices
    payload of a replica share ONE frame (after the first step's overflow),
    and come back as they went (lossless configuration, group of one)."""
    from deepreduce_tf.communicators import Allgather
    from deepreduce_tf.params import from_params

    launcher = RecordingLauncher()
    capacities = {}
    comp = from_params({"compressor": "topk", "compress_ratio": 0.5, "deepreduce": "index",
                        "index": "golomb", "memory": "none"})
    rng = np.random.default_rng(3)
    calls = []
    for step in range(3):
        dense = [tf.constant(rng.normal(size=(40, 40)).astype(np.float32)),
                 tf.constant(rng.normal(size=(7,)).astype(np.float32))]
        slices = [tf.IndexedSlices(tf.constant(rng.normal(size=(3, 8)).astype(np.float32)),
                                   tf.constant([4, 1, 4], tf.int64), tf.constant([10, 8])),
                  tf.IndexedSlices(tf.constant(rng.normal(size=(2, 4)).astype(np.float32)),
                                   tf.constant([0, 9], tf.int64), tf.constant([12, 4]))]
        transport = CollectiveTransport(
            launcher, "/cpu:0", 1, None,
            frames=lambda key: capacities.setdefault(key, tf.Variable(0, dtype=tf.int32)))
        before = len(launcher.sizes)
        (out,), got = Allgather().step_all(transport, [comp], [dense], ["a", "b"], [slices],
                                           ["e1", "e2"])
        calls.append(len(launcher.sizes) - before)
        np.testing.assert_array_equal(out[1].numpy(), dense[1].numpy())  # small: dense
        big = dense[0].numpy().reshape(-1)
        kept = np.argsort(-np.abs(big), kind="stable")[:800]
        want = np.zeros_like(big)
        want[kept] = big[kept]  # numpy top-k 50 %, lossless codecs
        np.testing.assert_array_equal(out[0].numpy().reshape(-1), want)
        for (reduced,), sent in zip(got, slices):
            np.testing.assert_allclose(tf.convert_to_tensor(reduced).numpy(),
                                       tf.convert_to_tensor(sent).numpy(), rtol=0, atol=1e-6)
    assert calls == [2, 1, 1]  # the first frame overflows its zero capacity, then one
