"""DeepReduceCrossDeviceOps checked the way TensorFlow checks its own
cross-device ops (tensorflow/python/distribute/cross_device_ops_test.py:
_testReductionAndBroadcast, _testIndexedSlicesAllReduce,
testReduceDistributedVariable; and the reduce_and_verify /
batch_reduce_and_verify helpers of its CollectiveOpsTest).

Every configuration here is lossless, so the answer must be exactly
TensorFlow's: tf.distribute.ReductionToOneDevice() reducing the same inputs
is the reference, and results are compared component by component the way
TF's _assert_mirrored_equal does: the same container type (Mirrored, or a
single Tensor / IndexedSlices when the destination is one device), the same
devices, and bit-identical values (IndexedSlices densified on both sides with
tf.convert_to_tensor). Test values are small multiples of 1/4, so every sum
and every mean over 2 or 4 replicas is exact in any order.

Modes: eager; tf.function; TF1-style (tf.Graph().as_default() and a
tf.compat.v1.Session, with NO variable initializer run: TensorFlow's own
cross-device ops hold no state and are run like that, so ours must set up
whatever it needs by itself); and, in subprocesses, eager execution disabled
and 4 logical CPU devices (the main process has 2, see conftest).
"""
import inspect
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import device_util
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import values as value_lib

import deepreduce_tf
from deepreduce_tf.distribute import DeepReduceCrossDeviceOps

HERE = os.path.dirname(os.path.abspath(__file__))
SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN
REDUCE_OPS = {"sum": SUM, "mean": MEAN}

CONFIGS = {
    "none": {"compressor": "none"},
    "deflate": {"compressor": "none", "deepreduce": "value", "value": "deflate"},
    "topk_all": {"compressor": "topk", "compress_ratio": 1.0, "memory": "none"},
    "allreduce": {"compressor": "none", "communicator": "allreduce"},
    # Residual memory (the default with a sparsifier) kept lossless: every
    # position is sent, so the residual stays 0 and g + 0 == g exactly. Its
    # state lies on the result's path: read before every compression.
    "topk_all_residual": {"compressor": "topk", "compress_ratio": 1.0},
    # The sparse all-reduce at compress_ratio 1: every worker picks every
    # position, the values are summed by the all-reduce.
    "sparse_allreduce": {"compressor": "topk", "compress_ratio": 1.0,
                         "communicator": "sparse_allreduce"},
    # K = the non-zeros (data-dependent), zeros decode to zeros: lossless.
    "topk_skip_zeros": {"compressor": "topk", "compress_ratio": 1.0, "memory": "none",
                        "topk_skip_zeros": True},
}
DTYPES = {"float32": np.float32, "float64": np.float64}
MODES = ("eager", "function", "tf1")

# Below and above the default min_size (1024 elements), and a scalar.
SMALL, LARGE = (7,), (40, 70)
BATCH_SHAPES = [(3000,), (40, 70), (7,), (5, 5, 60), ()]
# Where the results go. "per_replica" is the all-reduce of TF's tests
# (destinations = the value itself); "mirrored" a Mirrored value on every
# replica; "variable" a MirroredVariable; then one device: the first
# replica's, another replica's (a device string), a tensor's.
DESTINATIONS = ("per_replica", "mirrored", "variable", "first_device", "other_device",
                "tensor")


def cpu_devices(n):
    return tuple(f"/cpu:{i}" for i in range(n))


def values_for(shape, replica, dtype, salt=0):
    """Multiples of 1/4 in [-4, 4]: exact under any order of summation."""
    n = int(np.prod(shape, dtype=np.int64))
    ints = (np.arange(n) * 7 + salt * 5 + replica * 3) % 33 - 16
    return (ints * 0.25).astype(dtype).reshape(shape)


def per_replica(arrays, devices):
    comps = []
    for a, d in zip(arrays, devices):
        with tf.device(d):
            comps.append(tf.identity(tf.constant(a)))
    return value_lib.PerReplica(tuple(comps))


def replicated(shape, devices, dtype, salt=0):
    return per_replica([values_for(shape, r, dtype, salt) for r in range(len(devices))],
                       devices)


# Variable-length slices with repeated rows within and across replicas
# (TF's testAllReduceSparseVariableLength and _testIndexedSlicesAllReduce).
SLICE_ROWS = ([1, 3], [1], [0, 4, 4], [2, 9, 1])
DENSE_SHAPE = [10, 3]


def slices_replicated(devices, dtype, salt=0):
    comps = []
    for r, d in enumerate(devices):
        rows = SLICE_ROWS[r % len(SLICE_ROWS)]
        vals = values_for((len(rows), DENSE_SHAPE[1]), r, dtype, salt)
        with tf.device(d):
            comps.append(tf.IndexedSlices(tf.identity(tf.constant(vals)),
                                          tf.identity(tf.constant(rows, tf.int64)),
                                          tf.identity(tf.constant(DENSE_SHAPE, tf.int64))))
    return value_lib.PerReplica(tuple(comps))


def fake_mirrored(value, devices):
    comps = []
    for d in devices:
        with tf.device(d):
            comps.append(tf.identity(value))
    return distribute_utils.regroup(comps, wrap_class=value_lib.Mirrored)


def make_destination(kind, value, devices, variable):
    if kind == "per_replica":
        return value
    if kind == "mirrored":
        return fake_mirrored(tf.constant(1.0), devices)
    if kind == "variable":
        return variable
    if kind == "first_device":
        return devices[0]
    if kind == "other_device":
        return devices[-1]
    if kind == "tensor":
        with tf.device(devices[-1]):
            return tf.identity(tf.constant(1.0))
    raise ValueError(kind)


_strategies = {}


def mirrored_variable(devices):
    """A MirroredVariable on `devices`, made in the current graph (or eagerly).
    It is only a destination: it is never read, so never initialized."""
    key = tuple(devices)
    if key not in _strategies:
        _strategies[key] = tf.distribute.MirroredStrategy(list(devices))
    with _strategies[key].scope():
        var = tf.Variable(tf.zeros([3]), name="destination")
    assert isinstance(var, value_lib.MirroredVariable), type(var)
    return var


# ------------------------------------------------------------- scenarios
# Each scenario(ops, ref, devices, dtype, variable) makes its inputs in the
# current context and returns [(label, ours, tf's)]: the same call on our
# ops and on ReductionToOneDevice.

def scenario_reduce(ops, ref, devices, dtype, variable):
    out = []
    for size, shape in (("small", SMALL), ("large", LARGE)):
        for dest in DESTINATIONS:
            if size == "small" and dest not in ("per_replica", "first_device"):
                continue
            for name, op in REDUCE_OPS.items():
                value = replicated(shape, devices, dtype, salt=len(out))
                d = make_destination(dest, value, devices, variable)
                out.append((f"reduce {name} {size} to {dest}", ops.reduce(op, value, d),
                            ref.reduce(op, value, d)))
    return out


def scenario_batch_reduce(ops, ref, devices, dtype, variable):
    out = []
    for name, op in REDUCE_OPS.items():
        # Several shapes, all-reduced (destinations = the values).
        values = [replicated(s, devices, dtype, salt=i) for i, s in enumerate(BATCH_SHAPES)]
        pairs = [(v, v) for v in values]
        for i, (a, b) in enumerate(zip(ops.batch_reduce(op, pairs), ref.batch_reduce(op, pairs))):
            out.append((f"batch_reduce {name} all-reduce {BATCH_SHAPES[i]}", a, b))
        # One batch, every kind of destination (TF's product of destinations).
        values = [replicated(LARGE if i % 2 else SMALL, devices, dtype, salt=10 + i)
                  for i in range(len(DESTINATIONS))]
        pairs = [(v, make_destination(k, v, devices, variable))
                 for v, k in zip(values, DESTINATIONS)]
        for k, a, b in zip(DESTINATIONS, ops.batch_reduce(op, pairs), ref.batch_reduce(op, pairs)):
            out.append((f"batch_reduce {name} mixed destinations, to {k}", a, b))
    return out


def scenario_broadcast(ops, ref, devices, dtype, variable):
    out = []
    for size, shape in (("small", SMALL), ("large", LARGE)):
        for dest in DESTINATIONS:
            with tf.device(devices[0]):
                tensor = tf.constant(values_for(shape, 0, dtype, salt=len(out)))
            d = make_destination(dest, replicated(shape, devices, dtype), devices, variable)
            out.append((f"broadcast {size} to {dest}", ops.broadcast(tensor, d),
                        ref.broadcast(tensor, d)))
    return out


def scenario_indexed_slices(ops, ref, devices, dtype, variable):
    out = []
    for name, op in REDUCE_OPS.items():
        for dest in ("per_replica", "first_device", "other_device"):
            value = slices_replicated(devices, dtype, salt=len(out))
            d = make_destination(dest, value, devices, variable)
            out.append((f"reduce {name} IndexedSlices to {dest}", ops.reduce(op, value, d),
                        ref.reduce(op, value, d)))
        # Slices and dense tensors (below and above min_size) in one batch.
        values = [slices_replicated(devices, dtype, salt=1), replicated(LARGE, devices, dtype),
                  slices_replicated(devices, dtype, salt=2), replicated(SMALL, devices, dtype)]
        pairs = [(v, v) for v in values]
        for i, (a, b) in enumerate(zip(ops.batch_reduce(op, pairs), ref.batch_reduce(op, pairs))):
            out.append((f"batch_reduce {name} slices and dense, value {i}", a, b))
    return out


def scenario_compact(ops, ref, devices, dtype, variable):
    """The above in four calls, for the graph modes, where every call is
    traced (and optimized by Grappler) once: float32 and float64, sizes below
    and above min_size, a scalar, IndexedSlices, SUM and MEAN, every kind of
    destination, reduce, batch_reduce and broadcast. `dtype` is unused."""
    del dtype
    f32, f64 = np.float32, np.float64
    out = []
    batches = {
        "sum": [((3000,), f32, "per_replica"), (SMALL, f64, "variable"),
                ((), f32, "other_device"), ("slices", f64, "per_replica")],
        "mean": [(LARGE, f64, "mirrored"), (SMALL, f32, "first_device"),
                 ((5, 5, 60), f32, "tensor"), ("slices", f32, "per_replica")],
    }
    for name, rows in batches.items():
        pairs, labels = [], []
        for i, (shape, dt, kind) in enumerate(rows):
            value = (slices_replicated(devices, dt, salt=i) if shape == "slices"
                     else replicated(shape, devices, dt, salt=i))
            pairs.append((value, make_destination(kind, value, devices, variable)))
            labels.append(f"{np.dtype(dt).name} {shape} to {kind}")
        op = REDUCE_OPS[name]
        for label, a, b in zip(labels, ops.batch_reduce(op, pairs), ref.batch_reduce(op, pairs)):
            out.append((f"batch_reduce {name}: {label}", a, b))
    value = slices_replicated(devices, f64, salt=7)
    d = make_destination("other_device", value, devices, variable)
    out.append(("reduce mean IndexedSlices float64 to other_device", ops.reduce(MEAN, value, d),
                ref.reduce(MEAN, value, d)))
    value = replicated(LARGE, devices, f32, salt=8)
    out.append(("reduce sum large float32 to per_replica", ops.reduce(SUM, value, value),
                ref.reduce(SUM, value, value)))
    for kind in ("per_replica", "variable", "other_device"):
        with tf.device(devices[0]):
            tensor = tf.constant(values_for(LARGE, 0, f64, salt=9))
        d = make_destination(kind, replicated(SMALL, devices, f32), devices, variable)
        out.append((f"broadcast float64 to {kind}", ops.broadcast(tensor, d),
                    ref.broadcast(tensor, d)))
    return out


def scenario_mini(ops, ref, devices, dtype, variable):
    """Two calls (for the subprocesses): a MEAN batch of dense values below
    and above min_size, float32 and float64, and IndexedSlices; a SUM to a
    MirroredVariable. `dtype` is unused."""
    del dtype
    values = [replicated(LARGE, devices, np.float32), replicated(SMALL, devices, np.float64),
              slices_replicated(devices, np.float32), replicated((), devices, np.float32)]
    pairs = [(v, v) for v in values[:3]] + [(values[3], devices[-1])]
    out = [(f"batch_reduce mean, value {i}", a, b) for i, (a, b) in
           enumerate(zip(ops.batch_reduce(MEAN, pairs), ref.batch_reduce(MEAN, pairs)))]
    value = replicated(LARGE, devices, np.float64, salt=3)
    out.append(("reduce sum float64 to variable", ops.reduce(SUM, value, variable),
                ref.reduce(SUM, value, variable)))
    return out


SCENARIOS = {"reduce": scenario_reduce, "batch_reduce": scenario_batch_reduce,
             "broadcast": scenario_broadcast, "indexed_slices": scenario_indexed_slices,
             "compact": scenario_compact, "mini": scenario_mini}


# ------------------------------------------------------------- comparison
def _kind(x):
    if isinstance(x, value_lib.Mirrored):
        return "Mirrored"
    if isinstance(x, tf.IndexedSlices):
        return "IndexedSlices"
    if isinstance(x, tf.Tensor):
        return "Tensor"
    return type(x).__name__


def describe(x):
    """(structure, dense tensors): the container type, each component's type,
    resolved device and dtype; the components densified."""
    comps = list(x.values) if isinstance(x, value_lib.DistributedValues) else [x]
    structure = (_kind(x), tuple(_kind(c) for c in comps),
                 tuple(device_util.resolve(c.device) for c in comps),
                 tuple(c.dtype.name for c in comps))
    return structure, [tf.convert_to_tensor(c) for c in comps]


def run_scenario(mode, scenario, params, dtype, devices):
    """Runs `scenario` in `mode` on fresh ops made from `params`; returns
    [(label, (our structure, our arrays), (tf's structure, tf's arrays))]."""
    ops = DeepReduceCrossDeviceOps(params)
    ref = tf.distribute.ReductionToOneDevice()

    def build(variable):
        rows = scenario(ops, ref, devices, dtype, variable)
        labels = [label for label, _, _ in rows]
        described = [(describe(a), describe(b)) for _, a, b in rows]
        structures = [(a[0], b[0]) for a, b in described]
        tensors = [(a[1], b[1]) for a, b in described]
        return labels, structures, tensors

    def call(variable):
        if mode != "function":
            return build(variable)
        traced = {}

        @tf.function
        def fn():
            traced["labels"], traced["structures"], tensors = build(variable)
            return tensors

        tensors = fn()
        return traced["labels"], traced["structures"], tensors

    if mode not in MODES:
        raise ValueError(mode)
    if mode != "tf1" and tf.executing_eagerly():
        labels, structures, tensors = call(mirrored_variable(devices))
        arrays = tf.nest.map_structure(lambda t: t.numpy(), tensors)
    else:  # TF1 style, or any mode with eager execution disabled
        with tf.Graph().as_default() as graph:
            labels, structures, tensors = call(mirrored_variable(devices))
            # No initializer: the graph's variables are the caller's business.
            with tf.compat.v1.Session(graph=graph) as sess:
                arrays = sess.run(tensors)
    return [(label, (s[0], a[0]), (s[1], a[1]))
            for label, s, a in zip(labels, structures, arrays)]


def assert_same_as_tf(rows, dtype=None):
    assert rows
    for label, (ours, our_arrays), (theirs, their_arrays) in rows:
        assert ours == theirs, f"{label}: ours {ours} != TensorFlow's {theirs}"
        assert len(our_arrays) == len(their_arrays)
        for got, want in zip(our_arrays, their_arrays):
            assert got.dtype == want.dtype, label
            assert dtype is None or got.dtype == dtype, label
            assert got.shape == want.shape, label
            np.testing.assert_array_equal(got, want, err_msg=label)


def check(mode, scenario, config, dtype_name, devices):
    """Runs one scenario on fresh ops; raises AssertionError where ours and
    TensorFlow's answers differ; returns the number of results compared."""
    dtype = DTYPES[dtype_name] if dtype_name else None
    rows = run_scenario(mode, SCENARIOS[scenario], CONFIGS[config], dtype, devices)
    assert_same_as_tf(rows, dtype)
    return len(rows)


# ------------------------------------------------------------- 2 devices
DEVICES = cpu_devices(2)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("scenario", ["reduce", "batch_reduce", "indexed_slices"])
def test_eager_equals_reduction_to_one_device(scenario, config, dtype):
    check("eager", scenario, config, dtype, DEVICES)


@pytest.mark.parametrize("config", ["none", "topk_all"])
def test_eager_broadcast_equals_tf(config):
    check("eager", "broadcast", config, "float32", DEVICES)


@pytest.mark.parametrize("mode", ["function", "tf1"])
@pytest.mark.parametrize("config", sorted(set(CONFIGS) - {"topk_all"}))
def test_graph_equals_reduction_to_one_device(config, mode):
    """Inside a tf.function, and in a TF1 graph run by a Session that runs
    no initializer: reduce, batch_reduce (mixed dtypes, sizes, IndexedSlices
    and destinations) and broadcast, SUM and MEAN. (topk_all is left to the
    eager tests: topk_all_residual runs the same code, and its state too.)"""
    check(mode, "compact", config, None, DEVICES)


def test_sanity_of_the_reference():
    """The reference itself, against numpy: SUM and MEAN of dense values and
    of IndexedSlices (concatenated rows, as TF returns them)."""
    ref = tf.distribute.ReductionToOneDevice()
    value = replicated(LARGE, DEVICES, np.float32)
    want = values_for(LARGE, 0, np.float32) + values_for(LARGE, 1, np.float32)
    out = ref.reduce(SUM, value, value)
    assert isinstance(out, value_lib.Mirrored)
    for comp in out.values:
        np.testing.assert_array_equal(comp.numpy(), want)
    slices = slices_replicated(DEVICES, np.float32)
    dense = np.zeros(DENSE_SHAPE, np.float32)
    for r in range(2):
        np.add.at(dense, SLICE_ROWS[r], values_for((len(SLICE_ROWS[r]), 3), r, np.float32))
    mean = ref.reduce(MEAN, slices, "/cpu:1")
    assert isinstance(mean, tf.IndexedSlices)  # one device: not wrapped
    assert mean.indices.numpy().tolist() == SLICE_ROWS[0] + SLICE_ROWS[1]
    np.testing.assert_array_equal(tf.convert_to_tensor(mean).numpy(), dense / 2)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_list_of_device_strings_is_refused_like_tf(config):
    """TensorFlow's CrossDeviceOps take one device string, a tensor, a
    variable or a DistributedValues as destinations; a list of device strings
    is refused with a ValueError. Ours must answer the same."""
    ops = DeepReduceCrossDeviceOps(CONFIGS[config])
    ref = tf.distribute.ReductionToOneDevice()
    value = replicated(LARGE, DEVICES, np.float32)
    for call in (lambda o: o.reduce(SUM, value, list(DEVICES)),
                 lambda o: o.batch_reduce(SUM, [(value, list(DEVICES))]),
                 lambda o: o.broadcast(value.values[0], list(DEVICES))):
        with pytest.raises(ValueError) as theirs:
            call(ref)
        with pytest.raises(ValueError) as ours:
            call(ops)
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_two_threads_reduce_concurrently(config):
    """Two Python threads run reductions on the same ops object at once
    (eager); each gets its own, correct answers. The threads reduce batches
    of different lengths and shapes, so that state one call leaves for
    another (a plan, a context, a payload) cannot be mixed up unnoticed."""
    ops = DeepReduceCrossDeviceOps(CONFIGS[config])
    ref = tf.distribute.ReductionToOneDevice()
    rounds = 4
    barrier = threading.Barrier(2, timeout=60)
    results, errors = {}, []

    def work(tid):
        try:
            barrier.wait()
            got = []
            for step in range(rounds):
                salt = 100 * tid + step
                if tid == 0:
                    values = [replicated(LARGE, DEVICES, np.float32, salt=salt),
                              replicated(SMALL, DEVICES, np.float32, salt=salt),
                              slices_replicated(DEVICES, np.float32, salt=salt)]
                else:
                    values = [replicated((3000,), DEVICES, np.float32, salt=salt),
                              slices_replicated(DEVICES, np.float32, salt=salt),
                              replicated((5, 5, 60), DEVICES, np.float32, salt=salt),
                              replicated((), DEVICES, np.float32, salt=salt)]
                op = SUM if step % 2 else MEAN
                pairs = [(v, v) for v in values]
                for a, b in zip(ops.batch_reduce(op, pairs), ref.batch_reduce(op, pairs)):
                    got.append((describe(a), describe(b)))
            results[tid] = got
        except Exception as e:  # reported by the main thread
            errors.append(f"thread {tid}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a reducing thread hung"
    assert not errors, "\n".join(errors)
    for tid in range(2):
        assert len(results[tid]) == (3 + tid) * rounds
        for (ours, our_t), (theirs, their_t) in results[tid]:
            assert ours == theirs
            for a, b in zip(our_t, their_t):
                np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_stateless_configuration_creates_no_variables():
    """{'compressor': 'none'} without accounting holds no state: building a
    reduction in a TF1 graph adds no variable to it."""
    if "accounting" not in inspect.signature(DeepReduceCrossDeviceOps.__init__).parameters:
        pytest.skip("DeepReduceCrossDeviceOps has no `accounting` keyword yet")
    ops = DeepReduceCrossDeviceOps({"compressor": "none"}, accounting=False)
    with tf.Graph().as_default() as graph:
        value = replicated(LARGE, DEVICES, np.float32)
        small = replicated(SMALL, DEVICES, np.float32)
        slices = slices_replicated(DEVICES, np.float32)
        out = ops.reduce(SUM, value, value)
        batch = ops.batch_reduce(MEAN, [(value, value), (small, small), (slices, slices)])
        stateful = sorted({op.type for op in graph.get_operations()
                           if op.type in ("VarHandleOp", "VariableV2", "Variable",
                                          "VarIsInitializedOp", "AssignVariableOp")})
        assert stateful == [], stateful
        tensors = [describe(x)[1] for x in [out] + batch]
        with tf.compat.v1.Session(graph=graph) as sess:
            got = sess.run(tensors)
    want = values_for(LARGE, 0, np.float32) + values_for(LARGE, 1, np.float32)
    for comp in got[0]:
        np.testing.assert_array_equal(comp, want)
    for comp in got[1]:
        np.testing.assert_array_equal(comp, want / 2)


# ------------------------------------------------------------- subprocesses
# Run in a fresh interpreter: 4 logical CPUs, or eager execution disabled,
# must be configured before TensorFlow starts. The child imports this module
# and runs the same checks; it prints one RESULT line.
CHILD = """
import json, sys
import tensorflow as tf
setup = json.loads(sys.argv[1])
if setup["disable_eager"]:
    tf.compat.v1.disable_eager_execution()
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration()] * setup["devices"])
sys.path.insert(0, setup["tests_dir"])
import test_cross_device_ops as t
assert tf.executing_eagerly() is not setup["disable_eager"]
devices = t.cpu_devices(setup["devices"])
outcome = {}
for mode, scenario, config, dtype in setup["cases"]:
    name = f"{mode}/{scenario}/{config}/{dtype}"
    try:
        outcome[name] = ["ok", t.check(mode, scenario, config, dtype, devices)]
    except Exception as e:
        # The first line, and for TF's runtime errors the line naming the cause.
        lines = [l.strip() for l in str(e).splitlines() if l.strip()]
        why = lines[:1] + [l for l in lines[1:] if l.startswith("(0)")][:1]
        outcome[name] = ["fail", f"{type(e).__name__}: " + " | ".join(why)[:400]]
print("RESULT " + json.dumps(outcome), flush=True)
"""

# [mode, scenario, config, dtype]
SUBPROCESS_CASES = {
    "4_devices": dict(devices=4, disable_eager=False, cases=[
        ["eager", "mini", config, None] for config in sorted(CONFIGS)] + [
        ["eager", "reduce", "none", "float32"], ["function", "mini", "none", None]]),
    "eager_disabled": dict(devices=2, disable_eager=True, cases=[
        ["tf1", "mini", config, None] for config in ("none", "allreduce", "topk_all_residual")] + [
        ["function", "mini", "none", None]]),
}


CHILD_TIMEOUT = 240  # seconds from start; the children run beside the other tests


class Child:
    """One child process, started at once; output goes to files (a full pipe
    would stall a child nobody reads yet)."""

    def __init__(self, name, setup, tmp_dir):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        # The child imports the same deepreduce_tf as this process.
        pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(deepreduce_tf.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
        self.out_path = os.path.join(tmp_dir, f"{name}.out")
        self.err_path = os.path.join(tmp_dir, f"{name}.err")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(CHILD), json.dumps(setup)],
                cwd=HERE, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.deadline = time.monotonic() + CHILD_TIMEOUT

    def result(self):
        try:
            self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.reap()
            pytest.fail(f"child timed out after {CHILD_TIMEOUT} s\n{self._tail(self.err_path)}")
        with open(self.out_path) as f:
            out = f.read()
        lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
        assert self.proc.returncode == 0 and len(lines) == 1, (
            f"child failed (rc={self.proc.returncode})\nstdout:\n{out[-3000:]}\n"
            f"stderr:\n{self._tail(self.err_path)}")
        return json.loads(lines[0][len("RESULT "):])

    def reap(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    @staticmethod
    def _tail(path):
        with open(path, errors="replace") as f:
            return f.read()[-4000:]


@pytest.fixture(scope="module", autouse=True)
def children(request, tmp_path_factory):
    """Starts the children when the module's first test runs, if any of
    their tests is selected, so that they overlap with the in-process tests;
    always reaps them."""
    wanted = {item.callspec.params["setup"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_in_a_fresh_process"}
    tmp_dir = str(tmp_path_factory.mktemp("children"))
    started = {name: Child(name, dict(SUBPROCESS_CASES[name], tests_dir=HERE), tmp_dir)
               for name in sorted(wanted)}
    yield started
    for child in started.values():
        child.reap()


@pytest.mark.parametrize("setup", sorted(SUBPROCESS_CASES))
def test_in_a_fresh_process(setup, children):
    outcome = children[setup].result()
    cases = SUBPROCESS_CASES[setup]["cases"]
    assert len(outcome) == len(cases)
    failed = {k: v[1] for k, v in outcome.items() if v[0] != "ok"}
    assert not failed, "\n".join(f"{k}: {v}" for k, v in sorted(failed.items()))
    assert all(v[1] > 0 for v in outcome.values())
