"""deepreduce_tf.ops.fusion: flatten_concat / split_reshape against numpy."""
import numpy as np
import pytest
import tensorflow as tf

from deepreduce_tf.ops import fusion as fusion_ops

DTYPES = [np.float16, tf.bfloat16.as_numpy_dtype, np.float32, np.float64]
SHAPES = [(3, 4), (1,), (0,), (2, 1, 3), (), (5,)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16", "f32", "f64"])
def test_round_trip_matches_numpy(rng, run, device, dtype):
    arrays = [rng.normal(size=s).astype(dtype) for s in SHAPES]
    want = np.concatenate([a.ravel() for a in arrays])

    def fn(*ts):
        flat = fusion_ops.flatten_concat(list(ts))
        return flat, fusion_ops.split_reshape(flat, SHAPES)

    flat, back = run(fn, *[tf.constant(a) for a in arrays])
    np.testing.assert_array_equal(flat, want)
    for a, b in zip(arrays, back):
        assert b.shape == a.shape
        np.testing.assert_array_equal(b, a)


def test_large_inputs_use_the_thread_pool_and_stay_exact(rng):
    arrays = [rng.normal(size=(n,)).astype(np.float32) for n in (300_000, 1, 200_001, 7)]
    flat = fusion_ops.flatten_concat([tf.constant(a) for a in arrays])
    np.testing.assert_array_equal(flat.numpy(), np.concatenate(arrays))
    back = fusion_ops.split_reshape(flat, [a.shape for a in arrays])
    for a, b in zip(arrays, back):
        np.testing.assert_array_equal(b.numpy(), a)


class _DLPack:
    """A CPU tensor's own buffer as numpy sees it (through DLPack: no copy,
    unlike .numpy(), which may copy)."""

    def __init__(self, tensor):
        self.capsule = tf.experimental.dlpack.to_dlpack(tensor)

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def _address(eager_tensor):
    return np.from_dlpack(_DLPack(eager_tensor)).__array_interface__["data"][0]


def test_split_reshape_views_aligned_pieces_copies_the_others(rng):
    """Pieces that start at a 64-byte boundary of the input are views of its
    buffer (no copy, as TensorFlow's Split does), the others copies; values
    are right either way."""
    shapes = [(4, 4), (3,), (16,), (2, 8), (5,)]  # float32 offsets 0, 64, 76, 140, 204 B
    arrays = [rng.normal(size=s).astype(np.float32) for s in shapes]
    flat = fusion_ops.flatten_concat([tf.constant(a) for a in arrays])
    base = _address(flat)
    assert base % 64 == 0  # TensorFlow's CPU allocations are aligned
    back = fusion_ops.split_reshape(flat, shapes)
    offsets = np.cumsum([0] + [a.nbytes for a in arrays])[:-1]
    views = [_address(b) == base + int(o) for b, o in zip(back, offsets)]
    assert views == [True, True, False, False, False]
    for a, b in zip(arrays, back):
        np.testing.assert_array_equal(b.numpy(), a)


def test_split_reshape_views_never_see_later_updates(rng):
    """A view shares the buffer of a variable's value: updating the variable
    afterwards (copy on write) leaves the split pieces as they were."""
    a = rng.normal(size=32).astype(np.float32)
    var = tf.Variable(a)

    @tf.function
    def split_then_update():
        parts = fusion_ops.split_reshape(var.read_value(), [(16,), (16,)])
        with tf.control_dependencies(parts):
            var.assign_add(tf.ones([32]))
        return [tf.identity(p) for p in parts]

    parts = split_then_update()
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in parts]), a)
    np.testing.assert_array_equal(var.numpy(), a + 1)


def test_static_shapes_in_graph_mode():
    @tf.function
    def fn(a, b):
        flat = fusion_ops.flatten_concat([a, b])
        assert flat.shape == (12 + 5,)
        parts = fusion_ops.split_reshape(flat, [(3, 4), (5,)])
        assert [p.shape for p in parts] == [(3, 4), (5,)]
        return parts

    fn.get_concrete_function(tf.TensorSpec((3, 4)), tf.TensorSpec((5,)))


def test_one_node_each_way():
    @tf.function
    def fn(*ts):
        return fusion_ops.split_reshape(fusion_ops.flatten_concat(list(ts)),
                                        [(2, 2)] * len(ts))

    graph = fn.get_concrete_function(*[tf.TensorSpec((2, 2))] * 50).graph
    ops = [op.type for op in graph.get_operations()]
    assert ops.count("DeepReduce>FlattenConcat") == 1
    assert ops.count("DeepReduce>SplitReshape") == 1
    assert "Reshape" not in ops and "ConcatV2" not in ops


def test_wrong_length_is_refused(run):
    def fn(flat):
        return fusion_ops.split_reshape(flat, [(2, 2), (3,)])

    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="7|6"):
        run(fn, tf.zeros([6]))


def test_argument_errors():
    with pytest.raises(ValueError, match="at least one"):
        fusion_ops.flatten_concat([])
    with pytest.raises(TypeError, match="one float dtype"):
        fusion_ops.flatten_concat([tf.zeros([2]), tf.zeros([2], tf.float64)])
    with pytest.raises(TypeError, match="one float dtype"):
        fusion_ops.flatten_concat([tf.zeros([2], tf.int32)])
    with pytest.raises(ValueError, match="not fully defined"):
        fusion_ops.split_reshape(tf.zeros([2]), [tf.TensorShape([None])])
    with pytest.raises(ValueError, match="at least one"):
        fusion_ops.split_reshape(tf.zeros([2]), [])
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="vector"):
        fusion_ops.split_reshape(tf.zeros([2, 1]), [(2,)])


def _within_reference(a, limit):
    w = np.abs(a.astype(np.float64))
    return bool(np.all(np.isfinite(w) & (w <= limit)))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16", "f32", "f64"])
def test_all_within_matches_numpy(rng, run, dtype):
    big = rng.normal(size=300_001).astype(dtype)  # several chunks of the thread pool
    finfo_max = float(tf.as_dtype(dtype).max)
    cases = []
    for limit in (4.0, 1e4, 65504.0, finfo_max):
        cases.append((big, limit))
        for bad in (np.nan, np.inf, -np.inf, 4.5, -4.5):
            for at in (0, 150_000, 300_000):
                a = big.copy()
                a[at] = bad
                cases.append((a, limit))
    cases += [(np.zeros(0, dtype), 0.0), (np.array([-0.0, 0.0], dtype), 0.0),
              (np.array([1.0], dtype), 0.5), (np.array([4.0], dtype), 4.0),
              (np.array([-4.0], dtype), 4.0)]
    for a, limit in cases:
        got = run(lambda x: fusion_ops.all_within(x, limit), tf.constant(a))
        assert bool(got) == _within_reference(a, limit), (a[:3], limit)


def test_all_within_limit_is_never_rounded_up():
    # 1 + 2^-30 rounds to 1.0f up... and 1 - 2^-30 down to 1.0f: the op must
    # refuse 1.0 for a limit just below it, as numpy does in float64.
    x = tf.constant([1.0], tf.float32)
    assert not bool(fusion_ops.all_within(x, 1.0 - 2.0**-30))
    assert bool(fusion_ops.all_within(x, 1.0))
    # Beyond float32's range: every finite float64 fits, Inf does not.
    assert bool(fusion_ops.all_within(tf.constant([1e300], tf.float64), 1.7e308))
    assert not bool(fusion_ops.all_within(tf.constant([np.inf], tf.float64), 1.7e308))


def test_all_within_argument_errors():
    with pytest.raises(TypeError, match="float tensor"):
        fusion_ops.all_within(tf.constant([1], tf.int32), 1.0)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="limit must be >= 0"):
            fusion_ops.all_within(tf.constant([1.0]), bad)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16", "f32", "f64"])
def test_add_within_is_tf_add_and_all_within(rng, run, dtype):
    """The sum has exactly TensorFlow's x + y bits (for the 16-bit types too,
    where the sum rounds twice: to float, then to the type), the flag is
    all_within of that sum."""
    n = 300_001  # several chunks of the thread pool
    x = (rng.normal(size=n) * rng.lognormal(0, 3, n)).astype(dtype)
    y = (rng.normal(size=n) * rng.lognormal(0, 3, n)).astype(dtype)
    y[::7] = -x[::7]  # exact cancellations
    finfo_max = float(tf.as_dtype(dtype).max)
    cases = [(x, y, limit) for limit in (4.0, 1e4, finfo_max)]
    for bad in (np.nan, np.inf, finfo_max):  # finfo_max + finfo_max overflows
        for at in (0, n // 2, n - 1):
            xb = x.copy()
            xb[at] = bad
            yb = y.copy()
            yb[at] = finfo_max
            cases.append((xb, yb, finfo_max))
    cases.append((np.zeros(0, dtype), np.zeros(0, dtype), 0.0))
    for a, b, limit in cases:
        total, fits = run(lambda p, q: fusion_ops.add_within(p, q, limit), tf.constant(a),
                          tf.constant(b))
        want = (tf.constant(a) + tf.constant(b)).numpy()
        np.testing.assert_array_equal(_bits(np.asarray(total)), _bits(want))
        assert bool(fits) == _within_reference(want, limit), limit


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def test_add_within_argument_errors():
    one = tf.constant([1.0])
    with pytest.raises(TypeError, match="one dtype"):
        fusion_ops.add_within(one, tf.constant([1.0], tf.float64), 1.0)
    with pytest.raises(TypeError, match="float tensors"):
        fusion_ops.add_within(tf.constant([1]), tf.constant([1]), 1.0)
    with pytest.raises(ValueError, match="one shape"):
        fusion_ops.add_within(one, tf.constant([1.0, 2.0]), 1.0)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="limit must be >= 0"):
            fusion_ops.add_within(one, one, bad)
    # Shapes only known when it runs: the kernel refuses them with a message.
    f = tf.function(lambda p, q: fusion_ops.add_within(p, q, 1.0)[0],
                    input_signature=[tf.TensorSpec([None], tf.float32)] * 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        f(one, tf.constant([1.0, 2.0]))


def test_the_replicas_device_chooses_the_kernels(monkeypatch):
    # A tensor placed on a GPU takes TensorFlow's ops (GPU kernels), one on a
    # CPU the library's; a device string without a device type does not
    # decide: whether the process sees a GPU does.
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/GPU:0"):
            on_gpu = tf.compat.v1.placeholder(tf.float32, [4])
        with tf.device("/CPU:0"):
            on_cpu = tf.compat.v1.placeholder(tf.float32, [4])
        with tf.device("/job:worker/task:0"):
            untyped = tf.compat.v1.placeholder(tf.float32, [4])
        free = tf.compat.v1.placeholder(tf.float32, [4])
    assert fusion_ops._on_gpu(on_gpu) and not fusion_ops._on_gpu(on_cpu)
    assert fusion_ops._on_gpu(free, on_gpu) and not fusion_ops._on_gpu(untyped, on_cpu)
    for sees_gpu in (False, True):
        monkeypatch.setattr(fusion_ops, "_gpu_process", lambda: sees_gpu)
        assert fusion_ops._on_gpu(untyped) is sees_gpu and fusion_ops._on_gpu(free) is sees_gpu
    with graph.as_default():
        fusion_ops.add_within(on_gpu, on_gpu, 1.0)
        fusion_ops.add_within(on_cpu, on_cpu, 1.0)
    types = [op.type for op in graph.get_operations()]
    assert types.count("DeepReduce>AddWithin") == 1 and "AddV2" in types


def test_check_passes_the_value_through_or_raises_its_message():
    from tensorflow.python.framework import op_def_registry

    from deepreduce_tf import _checks

    x = tf.constant([1.0, -2.0, 3.5])
    np.testing.assert_array_equal(fusion_ops.check(x, True, "never"), x.numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="the header is wrong"):
        fusion_ops.check(x, tf.constant(False), "the header is wrong")
    with pytest.raises(ValueError, match="bool scalar"):
        fusion_ops.check(x, [True, True], "m")
    # Stateless: automatic control dependencies do not chain it with other ops.
    assert not op_def_registry.get("DeepReduce>Check").is_stateful

    @tf.function
    def decode(section, n):
        ok = _checks.check(tf.equal(tf.size(section), n), "value count differs from the header")
        return _checks.guarded(section * 2, ok)

    np.testing.assert_array_equal(decode(tf.constant([1, 2], tf.int64), 2), [2, 4])
    with pytest.raises(tf.errors.InvalidArgumentError, match="value count differs"):
        decode(tf.constant([1, 2, 3], tf.int64), 2)
    graph = decode.get_concrete_function(tf.TensorSpec([None], tf.int64),
                                         tf.TensorSpec([], tf.int32)).graph
    types = {op.type for op in graph.get_operations()}
    assert "DeepReduce>Check" in types and not types & {"Assert", "If"}
    # Eagerly a check raises at once.
    with pytest.raises(tf.errors.InvalidArgumentError, match="at once"):
        _checks.check(tf.constant(False), "at once")
    assert _checks.check(tf.constant(True), "fine") is None
    with pytest.raises(tf.errors.InvalidArgumentError, match="holds NaN"):
        tf.function(lambda v: _checks.all_finite(v, "holds NaN"))(tf.constant([1.0, np.nan]))


def test_check_runs_in_a_tf1_session_though_nothing_else_depends_on_it():
    from deepreduce_tf import _checks

    with tf.Graph().as_default():
        n = tf.compat.v1.placeholder(tf.int64, [])
        out = _checks.guarded(tf.constant([5, 6], tf.int64), _checks.check(n > 0, "n is not > 0"))
        with tf.compat.v1.Session() as sess:
            np.testing.assert_array_equal(sess.run(out, {n: 1}), [5, 6])
            with pytest.raises(tf.errors.InvalidArgumentError, match="n is not > 0"):
                sess.run(out, {n: 0})
