"""One worker process with TWO logical CPU devices, for the hierarchical
exchange test in tests/integrations/test_distribute.py.

    python hierarchical_worker.py SPEC_JSON

SPEC_JSON: {"task": i, "ports": [...], "params": {...}, "steps": N,
            "mode": "function" | "eager", "out": "path.npz", "ckpt": "dir"}

On a CPU-only machine MultiWorkerMirroredStrategy gives each worker one
device, so this builds DeepReduceCollectiveOps directly over the worker's two
logical CPUs (group size 2 x workers), the way TensorFlow's own
cross-device-ops tests run multi-worker collectives; the strategy is created
only to start this worker's server and collective executor. Every step
reduces (SUM) a PerReplica of two tensors per local replica, the gradients a
pure function of (task, replica, step). After step 2 the exchange state is
checkpointed; steps 3.. are run, the checkpoint restored, and steps 3.. run
again (a resume must reproduce them bit for bit). Writes every replica's
results, the inputs and the accounting to `out`. Run it with a cwd outside
the repository (the installed deepreduce_tf is imported).
"""
import json
import os
import sys

SHAPES = [(60, 50), (10,)]  # 3,000 elements compressed; 10 below min_size travel dense


def gradient(task, replica, step, shape):
    import numpy as np

    rng = np.random.RandomState(1000 * task + 100 * replica + step)
    return rng.randn(*shape).astype(np.float32)


def main():
    spec = json.loads(sys.argv[1])
    task = spec["task"]
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in spec["ports"]]},
        "task": {"type": "worker", "index": task}})
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.distribute import values as value_lib

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)

    from deepreduce_tf import distribute as drd

    tf.distribute.MultiWorkerMirroredStrategy()  # the server and the collective executor
    workers = len(spec["ports"])
    devices = [f"/job:worker/replica:0/task:{task}/device:CPU:{i}" for i in range(2)]
    ops = drd.DeepReduceCollectiveOps(
        spec["params"], devices, 2 * workers, tf.distribute.experimental.CommunicationOptions(),
        id_in_cluster=task)

    def reduce(step):
        values = []
        for shape in SHAPES:
            parts = []
            for r, d in enumerate(devices):
                with tf.device(d):
                    parts.append(tf.constant(gradient(task, r, step, shape)))
            values.append(value_lib.PerReplica(tuple(parts)))
        reduced = ops.batch_reduce(tf.distribute.ReduceOp.SUM, [(v, v) for v in values])
        return [[tf.identity(t) for t in m.values] for m in reduced]

    run = reduce if spec["mode"] == "eager" else None
    if run is None:
        fns = {}

        def run(step):
            if step not in fns:
                fns[step] = tf.function(lambda: reduce(step))
            return fns[step]()

    out = {"hierarchical": np.array(ops.hierarchical)}
    steps = spec["steps"]
    ckpt = tf.train.Checkpoint(state=ops.state)
    for step in range(steps):
        res = run(step)
        for j, per_replica in enumerate(res):
            for r, t in enumerate(per_replica):
                out[f"s{step}_t{j}_r{r}"] = t.numpy()
        if step == 0:
            out["step_sent"] = np.array(ops.step_bytes()["sent_bytes"])
            out["step_received"] = np.array(ops.step_bytes()["received_bytes"])
            out["step_replicas"] = np.array(ops.step_bytes()["replicas"])
            out["collective_first"] = np.array(ops.collective_bytes())
        if step == 1:
            path = ckpt.write(os.path.join(spec["ckpt"], f"w{task}"))
    out["collective"] = np.array(ops.collective_bytes())
    ckpt.read(path).assert_consumed()
    for step in range(2, steps):
        for j, per_replica in enumerate(run(step)):
            for r, t in enumerate(per_replica):
                out[f"resumed_s{step}_t{j}_r{r}"] = t.numpy()
    np.savez(spec["out"], **out)


if __name__ == "__main__":
    main()
