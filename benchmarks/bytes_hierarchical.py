"""Bytes per worker of the flat and the hierarchical exchange, as the number
of workers W grows (G logical devices per worker).

    .venv/bin/python benchmarks/bytes_hierarchical.py [--workers 2,4,8] [--gpus 2] \\
        [--model resnet20] [--config golomb_qsgd_dgc] [--steps 3] [--json out.json]

Hierarchical: W worker processes (each with G logical CPU devices, one
TensorFlow server each) build DeepReduceCollectiveOps over their G devices
(group size W·G, the way the hierarchical test does). Flat: one process with
W·G logical devices and DeepReduceCrossDeviceOps (the same per-replica
payloads and ledger as W processes of G devices). Both reduce the
gradients of the model's trainable variables (random values: the bytes do not
depend on them, the configuration's top-k keeps a fixed K) for --steps steps;
the last step's accounting is read on worker 0: step_bytes(), the payload
bytes each sending replica sent and received from the others (exact).
Per worker = per sending replica × the replicas that send (flat: all G;
hierarchical: the leader). Payloads decoded per worker: flat W·G (each
process decodes every payload once), hierarchical W.

The processes share this machine's cores: run it for bytes, not for time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bytes_by_replicas import CONFIGS, SHAPES  # noqa: E402  pylint: disable=wrong-import-position

from deepreduce_bench.runner import free_ports  # noqa: E402  pylint: disable=wrong-import-position


def _shapes(model_name):
    import keras

    keras.utils.set_random_seed(0)
    if model_name == "mlp":
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256),
                                  keras.layers.Dense(128), keras.layers.Dense(10)])
    else:
        from deepreduce_bench import models

        build = models.resnet20 if model_name == "resnet20" else models.resnet50
        model = build(SHAPES[model_name], 10)
    return [tuple(v.shape) for v in model.trainable_variables]


def _values(tf, value_lib, model, devices, first):
    """PerReplica gradients of the model's variables on `devices`, the global
    replica numbers first, first + 1, ...: replica i's gradient of variable j
    is the same in the flat and the hierarchical run."""
    import numpy as np

    values = []
    for j, shape in enumerate(_shapes(model)):
        parts = []
        for r, d in enumerate(devices):
            rng = np.random.default_rng(1000 * (first + r) + j)
            with tf.device(d):
                parts.append(tf.constant(rng.normal(size=shape).astype(np.float32)))
        values.append(value_lib.PerReplica(tuple(parts)))
    return values


def _last_step_bytes(tf, ops, values, steps):
    """Reduces `values` (SUM) `steps` times in one tf.function; the last
    step's ops.step_bytes()."""

    @tf.function
    def step():
        return ops.batch_reduce(tf.distribute.ReduceOp.SUM, [(v, v) for v in values])

    for _ in range(steps):
        step()
    return ops.step_bytes()


def _flat(spec):
    """The flat exchange's accounting: W·G replicas, each its own worker on
    the wire, in one process (DeepReduceCrossDeviceOps over W·G logical
    devices: the same payloads and the same per-replica ledger as W worker
    processes of G devices each; the multi-process flat run is not used: see
    docs/scaling.md)."""
    import tensorflow as tf
    from tensorflow.python.distribute import values as value_lib

    workers, gpus = spec["workers"], spec["gpus"]
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * (workers * gpus))
    from deepreduce_tf import distribute as drd

    devices = [f"/cpu:{i}" for i in range(workers * gpus)]
    ops = drd.DeepReduceCrossDeviceOps(CONFIGS[spec["config"]])
    drd.KerasState(ops)
    values = _values(tf, value_lib, spec["model"], devices, first=0)
    b = _last_step_bytes(tf, ops, values, spec["steps"])
    return {"workers": workers, "gpus": gpus, "hierarchical": False, "senders": gpus,
            "dense_bytes": b["dense_bytes"], "sent_per_worker": b["sent_bytes"] * gpus,
            "received_per_worker": b["received_bytes"] * gpus,
            "decoded_per_worker": workers * gpus}


def _worker(spec):
    task, workers, gpus = spec["task"], len(spec["ports"]), spec["gpus"]
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in spec["ports"]]},
        "task": {"type": "worker", "index": task}})
    import tensorflow as tf
    from tensorflow.python.distribute import values as value_lib

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * gpus)
    from deepreduce_tf import distribute as drd

    tf.distribute.MultiWorkerMirroredStrategy()
    devices = [f"/job:worker/replica:0/task:{task}/device:CPU:{i}" for i in range(gpus)]
    params = dict(CONFIGS[spec["config"]], hierarchical=spec["hierarchical"])
    ops = drd.DeepReduceCollectiveOps(params, devices, workers * gpus,
                                      tf.distribute.experimental.CommunicationOptions(),
                                      id_in_cluster=task)
    drd.KerasState(ops)  # never resumed: no StateNotSavedWarning
    values = _values(tf, value_lib, spec["model"], devices, first=task * gpus)
    b = _last_step_bytes(tf, ops, values, spec["steps"])
    senders = b["replicas"]
    return {"workers": workers, "gpus": gpus, "hierarchical": ops.hierarchical,
            "senders": senders, "dense_bytes": b["dense_bytes"],
            "sent_per_worker": b["sent_bytes"] * senders,
            "received_per_worker": b["received_bytes"] * senders,
            "decoded_per_worker": workers if ops.hierarchical else workers * gpus}


def _run(workers, gpus, hierarchical, args):
    ports = free_ports(workers)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    procs, logs = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="dr_hier_") as tmp:
            for task in range(workers):
                spec = {"task": task, "ports": ports, "gpus": gpus,
                        "hierarchical": hierarchical, "model": args.model,
                        "config": args.config, "steps": args.steps}
                # Files, not pipes: a worker blocked on a full pipe would stall
                # the collective of every other worker.
                out = open(os.path.join(tmp, f"{task}.out"), "w+", encoding="utf-8")
                logs.append(out)
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                    stdout=out, stderr=subprocess.STDOUT, text=True))
            deadline = time.monotonic() + args.timeout
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            texts = []
            for f in logs:
                f.seek(0)
                texts.append(f.read())
                f.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    for p, text in zip(procs, texts):
        if p.returncode != 0:
            raise RuntimeError(f"a worker failed:\n{text[-3000:]}")
    return json.loads(texts[0].strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,4,8")
    parser.add_argument("--gpus", type=int, default=2, help="logical devices per worker")
    parser.add_argument("--model", default="resnet20", choices=sorted(SHAPES))
    parser.add_argument("--config", default="golomb_qsgd_dgc",
                        choices=["golomb_qsgd_dgc", "sparse_allreduce"])  # non-additive exchanges
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(_flat(spec) if spec.get("flat") else _worker(spec)))
        return 0
    if args.gpus < 2:
        parser.error("--gpus must be >= 2: with one device per worker both exchanges are one")
    rows = []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for w in [int(x) for x in args.workers.split(",")]:
        spec = {"flat": True, "workers": w, "gpus": args.gpus, "model": args.model,
                "config": args.config, "steps": args.steps}
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                              capture_output=True, text=True, timeout=args.timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"the flat run failed:\n{proc.stderr[-3000:]}")
        rows.append(dict(json.loads(proc.stdout.strip().splitlines()[-1]), model=args.model,
                         config=args.config))
        rows.append(dict(_run(w, args.gpus, True, args), model=args.model, config=args.config))
    print("| model | W workers × G | exchange | payloads decoded per worker | sent B/worker "
          "| received B/worker |")
    print("|---|--:|---|--:|--:|--:|")
    for r in rows:
        print(f"| {r['model']} | {r['workers']} × {r['gpus']} | "
              f"{'hierarchical' if r['hierarchical'] else 'flat'} | {r['decoded_per_worker']} | "
              f"{r['sent_per_worker']:,} | {r['received_per_worker']:,} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
