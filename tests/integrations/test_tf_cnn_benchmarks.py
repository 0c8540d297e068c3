"""deepreduce-tf-cnn-benchmarks (deepreduce_tf.integrations.tf_cnn_benchmarks): DeepReduce as
tf_cnn_benchmarks' batch all-reduce algorithm.

Always: the algorithm against a stand-in of the script's BatchAllReduceAlgorithm
interface written here, in TF1 graph mode (a Session, no initializer run, as
the script's replicated mode builds it): lossless configurations give exactly
the script's own replicated result (tf.add_n on one device, copied to every
device), lossy ones keep every device bit-identical and conserve the sum.
With TF_CNN_BENCHMARKS_DIR pointing at a checkout of tensorflow/benchmarks
(CI has none: skipped, saying so): the real BatchAllReduceAlgorithm with the
script's packing options, and the real script for a few steps.
"""
import abc
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from deepreduce_bench.runner import free_ports
from deepreduce_tf.integrations import tf_cnn_benchmarks as tcb
from deepreduce_tf.distribute import DeepReduceCrossDeviceOps

# Trains models, starts worker processes or runs Flower (minutes):
# `pytest -m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow

LOSSLESS = {
    "none": {"compressor": "none"},
    "allreduce": {"compressor": "none", "communicator": "allreduce"},
    "deflate": {"compressor": "none", "deepreduce": "value", "value": "deflate"},
    "topk_all_golomb": {"compressor": "topk", "compress_ratio": 1.0, "deepreduce": "index",
                        "index": "golomb"},
    "sparse_allreduce": {"compressor": "topk", "compress_ratio": 1.0,
                         "communicator": "sparse_allreduce", "deepreduce": "index",
                         "index": "golomb"},
}
# Gradient-like shapes: under and over min_size, a scalar.
SHAPES = [(3, 3, 4, 8), (8,), (40, 70), (), (1000,)]


class StandInBatchAllReduce(abc.ABC):
    """The part of tf_cnn_benchmarks' batch_allreduce.BatchAllReduceAlgorithm
    the adapter relies on: batch_all_reduce() hands the per-device tensor
    lists to _do_batch_all_reduce() and returns (reduced, warmup_ops)."""

    def batch_all_reduce(self, all_device_tensors, num_splits=None, compact_tensors=False,
                         defer_tensors=False, xla_compile=False):
        assert not (num_splits or compact_tensors or defer_tensors or xla_compile)
        return self._do_batch_all_reduce(all_device_tensors), []

    @abc.abstractmethod
    def _do_batch_all_reduce(self, all_device_tensors):
        """[device][tensor] -> [device][tensor] sums."""


class StandInCopyToDevice(StandInBatchAllReduce):
    """The script's default replicated reduction (CopyToDeviceAlgorithm on
    /cpu:0): tf.add_n of each tensor's copies on one device, used by all."""

    def _do_batch_all_reduce(self, all_device_tensors):
        with tf.device("/cpu:0"):
            sums = [tf.add_n(list(ts)) for ts in zip(*all_device_tensors)]
        return [[tf.identity(s) for s in sums] for _ in all_device_tensors]


def session_config(n):
    return tf.compat.v1.ConfigProto(device_count={"CPU": n}, allow_soft_placement=False)


def gradient(rng, shape, n_devices):
    """Random float32 values; for more than 2 devices multiples of 1/4, whose
    sums are exact in any order: tf.add_n's order of summation over 3+
    inputs is TensorFlow's choice (Grappler may re-associate it), DeepReduce
    sums in device order. Two inputs give the same bits in either order."""
    if n_devices <= 2:
        return rng.standard_normal(shape).astype(np.float32)
    return (rng.integers(-64, 65, size=shape) * 0.25).astype(np.float32)


def build_and_run(algorithms, n_devices, steps=3, seed=0):
    """Builds every algorithm over the same per-device gradient placeholders
    in one TF1 graph and runs `steps` steps WITHOUT a variable initializer.
    Returns (inputs, outputs): inputs[step][device][tensor] fed,
    outputs[algorithm][step][device][tensor]."""
    rng = np.random.default_rng(seed)
    with tf.Graph().as_default() as graph:
        feeds, built, grads = [], [], []
        for d in range(n_devices):
            with tf.device(f"/cpu:{d}"):
                feeds.append([tf.compat.v1.placeholder(tf.float32, s) for s in SHAPES])
                grads.append([tf.identity(p) for p in feeds[-1]])
        warmup = []
        for alg in algorithms:
            reduced, warm = alg.batch_all_reduce(grads)
            built.append(reduced)
            warmup.extend(tf.nest.flatten(warm))
        inputs, outputs = [], [[] for _ in algorithms]
        with tf.compat.v1.Session(graph=graph, config=session_config(n_devices)) as sess:
            for step in range(steps):
                values = [[gradient(rng, s, n_devices) for s in SHAPES]
                          for _ in range(n_devices)]
                fd = {p: v for dp, dv in zip(feeds, values) for p, v in zip(dp, dv)}
                if step == 0 and warmup:  # deferred tensors: the script's post-init ops
                    sess.run(warmup, feed_dict=fd)
                got = sess.run(built, feed_dict=fd)
                inputs.append(values)
                for a, g in enumerate(got):
                    outputs[a].append(g)
    return inputs, outputs


def ours(params, base=StandInBatchAllReduce):
    return tcb.algorithm_class(base)(DeepReduceCrossDeviceOps(params))


@pytest.mark.parametrize("n_devices", [2, 4])
@pytest.mark.parametrize("config", sorted(LOSSLESS))
def test_lossless_equals_the_scripts_replicated_result(config, n_devices):
    _, (theirs, mine) = build_and_run([StandInCopyToDevice(), ours(LOSSLESS[config])],
                                      n_devices)
    for step, (t, m) in enumerate(zip(theirs, mine)):
        for d in range(n_devices):
            for j, shape in enumerate(SHAPES):
                assert m[d][j].shape == shape
                assert m[d][j].dtype == np.float32
                np.testing.assert_array_equal(m[d][j], t[d][j],
                                              err_msg=f"{config} step {step} device {d} #{j}")


def test_lossy_devices_identical_and_the_sum_conserved():
    """top-k 10 % + golomb + qsgd: every device gets the same bits; the sum of
    the residuals and of the decoded sums over the steps equals the sum of
    every gradient fed (error feedback loses nothing)."""
    params = {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
              "index": "golomb", "value": "qsgd", "bits": 7, "min_size": 16}
    alg = ours(params)
    rng = np.random.default_rng(3)
    shapes = [(30, 20), (500,)]
    steps, n = 4, 2
    with tf.Graph().as_default() as graph:
        feeds, grads = [], []
        for d in range(n):
            with tf.device(f"/cpu:{d}"):
                feeds.append([tf.compat.v1.placeholder(tf.float32, s) for s in shapes])
                grads.append([tf.identity(p) for p in feeds[-1]])
        reduced, _ = alg.batch_all_reduce(grads)
        residuals = [c.memory.residuals for c in alg.ops.compressors]
        with tf.compat.v1.Session(graph=graph, config=session_config(n)) as sess:
            fed = [np.zeros(s, np.float64) for s in shapes]
            decoded = [np.zeros(s, np.float64) for s in shapes]
            for _ in range(steps):
                values = [[rng.standard_normal(s).astype(np.float32) for s in shapes]
                          for _ in range(n)]
                out = sess.run(reduced, feed_dict={p: v for dp, dv in zip(feeds, values)
                                                   for p, v in zip(dp, dv)})
                for j in range(len(shapes)):
                    np.testing.assert_array_equal(out[0][j].view(np.uint32),
                                                  out[1][j].view(np.uint32))
                    decoded[j] += out[0][j]
                    fed[j] += sum(v[j] for v in values)
                bytes_now = sess.run(alg.byte_tensors)
            res = sess.run(residuals)
    left = sum(np.concatenate([np.ravel(v) for v in r.values()]).astype(np.float64)
               for r in res)
    flat_fed = np.concatenate([f.ravel() for f in fed])
    flat_dec = np.concatenate([f.ravel() for f in decoded])
    # qsgd rounds the sent values (kept in the residual: exact up to float32 sums)
    np.testing.assert_allclose(flat_dec + left, flat_fed, atol=2e-4)
    dense = 4 * sum(int(np.prod(s)) for s in shapes)
    assert bytes_now["dense_bytes"] == dense
    assert 0 < bytes_now["sent_bytes"] < dense / 3
    assert bytes_now["steps"] == steps
    assert bytes_now["total_dense_bytes"] == steps * dense


def test_eager_reduce_tensors_matches_numpy():
    ops = DeepReduceCrossDeviceOps({"compressor": "none"})
    values = [[np.full((5, 300), d + 1.5, np.float32), np.arange(4, dtype=np.int64) * (d + 1)]
              for d in range(2)]
    lists = []
    for d in range(2):
        with tf.device(f"/cpu:{d}"):
            lists.append([tf.constant(v) for v in values[d]])
    out = ops.reduce_tensors(lists)
    for d in range(2):
        assert out[d][0].device.endswith(f"CPU:{d}")
        np.testing.assert_array_equal(out[d][0].numpy(), values[0][0] + values[1][0])
        np.testing.assert_array_equal(out[d][1].numpy(), values[0][1] + values[1][1])
    with pytest.raises(ValueError, match="mean over devices is not defined"):
        ops.reduce_tensors(lists, average=True)


def test_reduce_tensors_refuses_mismatched_lists():
    ops = DeepReduceCrossDeviceOps({"compressor": "none"})
    with tf.device("/cpu:0"):
        a = [tf.zeros([4]), tf.zeros([3])]
    with tf.device("/cpu:1"):
        b = [tf.zeros([4]), tf.zeros([5])]
        c = [tf.zeros([4])]
    with pytest.raises(ValueError, match="tensor 1 differs between device 0"):
        ops.reduce_tensors([a, b])
    with pytest.raises(ValueError, match="device 1 has 1 tensors, device 0 has 2"):
        ops.reduce_tensors([a, c])
    with pytest.raises(ValueError, match="two lists are on the same device"):
        ops.reduce_tensors([a, a])


# ------------------------------------------------------------ command line
def test_command_line_errors_say_what_to_do(tmp_path, capsys):
    assert tcb.main(["prog", "--model=resnet20"]) == 2
    assert "--benchmarks_dir is required" in capsys.readouterr().err
    assert tcb.main(["prog", f"--benchmarks_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "no tf_cnn_benchmarks.py" in err and "github.com/tensorflow/benchmarks" in err
    assert tcb.main(["prog", "--benchmarks_dir"]) == 2
    assert "needs a value" in capsys.readouterr().err


def test_split_and_find(tmp_path):
    assert tcb.split_benchmarks_dir(["--a=1", "--benchmarks_dir", "X", "--b"]) == ("X", ["--a=1", "--b"])
    assert tcb.split_benchmarks_dir(["--benchmarks_dir=Y"]) == ("Y", [])
    script = tmp_path / "scripts" / "tf_cnn_benchmarks"
    script.mkdir(parents=True)
    for name in ("tf_cnn_benchmarks", "benchmark_cnn", "batch_allreduce", "flags"):
        (script / f"{name}.py").write_text("")
    assert tcb.find_script_dir(str(tmp_path)) == str(script)
    assert tcb.find_script_dir(str(script)) == str(script)


def test_missing_tf_keras_is_named(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tf_keras" else real(name, *a))
    with pytest.raises(tcb.AdapterError, match="tf_keras==2.21.0"):
        tcb._prepare_environment()  # pylint: disable=protected-access


# ------------------------------------------------------------ a real checkout
CHECKOUT = os.environ.get("TF_CNN_BENCHMARKS_DIR")
needs_checkout = pytest.mark.skipif(
    not CHECKOUT, reason="TF_CNN_BENCHMARKS_DIR (a checkout of github.com/tensorflow/benchmarks) "
    "is not set: the real script is not tested here")


def _script_module(name):
    path = tcb.find_script_dir(CHECKOUT)
    if path not in sys.path:
        sys.path.insert(0, path)
    return __import__(name)


@needs_checkout
@pytest.mark.parametrize("num_splits,defer", [(0, False), (2, False), (0, True)])
def test_real_algorithm_interface_equals_copy_to_device(num_splits, defer):
    ba = _script_module("batch_allreduce")

    class Real(StandInBatchAllReduce):  # the real batch_all_reduce, packing included
        def __init__(self, alg):
            self.alg = alg

        def batch_all_reduce(self, all_device_tensors, *_):
            return self.alg.batch_all_reduce(all_device_tensors, num_splits, False, defer)

        def _do_batch_all_reduce(self, all_device_tensors):
            raise AssertionError("unused")

    theirs = Real(ba.CopyToDeviceAlgorithm(["/cpu:0"]))
    mine = Real(tcb.algorithm_class(ba.BatchAllReduceAlgorithm)(
        DeepReduceCrossDeviceOps(LOSSLESS["topk_all_golomb"])))
    _, (t_out, m_out) = build_and_run([theirs, mine], 2, steps=3)
    for t, m in zip(t_out, m_out):
        for d in range(2):
            for j in range(len(SHAPES)):
                np.testing.assert_array_equal(m[d][j], t[d][j])


def _run_script(tmp_path, *flags):
    cmd = [sys.executable, "-m", "deepreduce_tf.integrations.tf_cnn_benchmarks", f"--benchmarks_dir={CHECKOUT}",
           "--model=resnet20", "--data_name=cifar10", "--device=cpu", "--num_gpus=2",
           "--local_parameter_device=cpu", "--data_format=NHWC", "--batch_size=8",
           "--num_batches=3", "--num_warmup_batches=1", "--display_every=1", *flags]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          check=False)


@needs_checkout
def test_real_script_runs_with_deepreduce(tmp_path):
    proc = _run_script(tmp_path, "--variable_update=deepreduce", "--compressor=topk",
                       "--compress_ratio=0.01", "--deepreduce=both", "--index=golomb",
                       "--value=qsgd", "--bits=7")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "total images/sec" in out
    assert "DeepReduce:  DeepReduceCrossDeviceOps(" in out
    lines = [ln for ln in out.splitlines() if "\tDeepReduce: " in ln]
    assert [ln.split("\t")[0] for ln in lines] == ["1", "2", "3"], out[-3000:]
    assert "DeepReduce total:" in out and "in 4 exchanges" in out


@needs_checkout
def test_real_script_refuses_what_deepreduce_cannot_run(tmp_path):
    proc = _run_script(tmp_path, "--variable_update=replicated", "--compressor=topk")
    assert proc.returncode == 2 and "--variable_update=deepreduce only" in proc.stderr
    proc = _run_script(tmp_path, "--variable_update=deepreduce", "--all_reduce_spec=pscpu")
    assert proc.returncode == 2 and "--all_reduce_spec" in proc.stderr
    proc = _run_script(tmp_path, "--variable_update=deepreduce", "--index=nonsense")
    assert proc.returncode != 0 and "nonsense" in proc.stderr
    proc = _run_script(tmp_path, "--variable_update=deepreduce", "--exchange=tf")
    assert proc.returncode != 0 and "exchange" in proc.stderr  # not a flag here


# ------------------------------------------------------------ TF1 multi-worker
def _run_all(cmds, cwd, timeout):
    """Runs the commands at once, always reaps them; asserts each exited 0;
    returns their outputs."""
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for c in cmds]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    return outs


def _two_workers(tmp_path, params, steps=3):
    """tests/integrations/tf1_collective_worker.py in two processes; their npz results."""
    import json

    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf1_collective_worker.py")
    ports = ",".join(str(p) for p in free_ports(2))
    outs = [str(tmp_path / f"w{i}.npz") for i in range(2)]
    _run_all([[sys.executable, worker, str(i), ports, json.dumps(params), str(steps), outs[i]]
              for i in range(2)], tmp_path, timeout=180)
    return [np.load(o) for o in outs]


@pytest.mark.parametrize("config", ["none", "golomb_qsgd", "sparse_allreduce"])
def test_tf1_collective_workers(config, tmp_path):
    """The script's collective mode (a Server per worker, one Session each,
    identical graphs): the sum over both workers, bit-identical on both;
    lossless: exactly the numpy sum. Payload sizes change every step, which
    the per-step instance keys allow (the sparse all-reduce's summed values
    too: their number is the size of the union)."""
    params = LOSSLESS["none"] if config == "none" else {
        "compressor": "topk", "compress_ratio": 0.05, "deepreduce": "both", "index": "golomb",
        "value": "qsgd", "bits": 7, "min_size": 16}
    if config == "sparse_allreduce":
        params = dict(params, communicator="sparse_allreduce", value="fp16")
        del params["bits"]
    w0, w1 = _two_workers(tmp_path, params)
    for step in range(3):
        for j in range(3):
            a, b = w0[f"got_{step}_{j}"], w1[f"got_{step}_{j}"]
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
            want = w0[f"fed_{step}_{j}"] + w1[f"fed_{step}_{j}"]
            if config == "none":
                np.testing.assert_array_equal(a, want)
            else:  # top-k 5 % of a sum, decoded: nonzero where sent, bounded by the inputs
                assert 0 < np.count_nonzero(a) < a.size or a.size < 16


@needs_checkout
def test_real_script_two_workers(tmp_path):
    """--variable_update=deepreduce --job_name=worker: the script's collective
    mode carries the payloads; both workers log the same loss and bytes."""
    ports = free_ports(2)
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    cmds = []
    for i in range(2):
        cmds.append([sys.executable, "-m", "deepreduce_tf.integrations.tf_cnn_benchmarks",
               f"--benchmarks_dir={CHECKOUT}", "--model=resnet20", "--data_name=cifar10",
               "--device=cpu", "--num_gpus=1", "--local_parameter_device=cpu",
               "--data_format=NHWC", "--batch_size=8", "--num_batches=3",
               "--num_warmup_batches=1", "--display_every=1", f"--worker_hosts={hosts}",
               "--job_name=worker", f"--task_index={i}", "--variable_update=deepreduce",
               "--compressor=topk", "--compress_ratio=0.01", "--deepreduce=both",
               "--index=golomb", "--value=qsgd", "--bits=7"])
    outs = _run_all(cmds, tmp_path, timeout=300)
    for out in outs:
        assert "collective_all_reduce mode with this exchange" in out
    logs = [[ln for ln in out.splitlines() if ln[:1].isdigit() and "\t" in ln] for out in outs]
    assert len(logs[0]) == 6 and [ln.split("\t")[-1] for ln in logs[0]] == \
        [ln.split("\t")[-1] for ln in logs[1]], logs
