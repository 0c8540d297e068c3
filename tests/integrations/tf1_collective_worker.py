"""One worker of tests/integrations/test_tf_cnn_benchmarks.py's TF1
multi-worker test: the way tf_cnn_benchmarks' collective mode runs (a
tf.train.Server per worker, each worker building the same graph, a Session
with a collective graph key), with DeepReduceCrossDeviceOps.reduce_tensors
over a GraphCollectiveLauncher.

    python tf1_collective_worker.py TASK PORT0,PORT1 PARAMS_JSON STEPS OUT.npz

Writes the inputs it fed and the reduced results of every step to OUT.npz.
"""
import json
import sys

import numpy as np
import tensorflow.compat.v1 as tf

SHAPES = [(30, 50), (7,), (2000,)]


def main():
    task, ports, params, steps, out = (int(sys.argv[1]), sys.argv[2].split(","),
                                       json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    tf.disable_v2_behavior()
    from deepreduce_tf.distribute import DeepReduceCrossDeviceOps
    from deepreduce_tf.transport import GraphCollectiveLauncher

    cluster = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{p}" for p in ports]})
    config = tf.ConfigProto()
    config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    server = tf.train.Server(cluster, job_name="worker", task_index=task, config=config)
    device = f"/job:worker/replica:0/task:{task}/cpu:0"
    keys = iter(range(1, 1000))
    with tf.Graph().as_default():
        with tf.device(device):
            feeds = [tf.placeholder(tf.float32, s) for s in SHAPES]
            grads = [tf.identity(f) for f in feeds]
        launcher = GraphCollectiveLauncher(device, len(ports), 1, lambda: next(keys))
        (reduced,) = DeepReduceCrossDeviceOps(params).reduce_tensors([grads],
                                                                      collective=launcher)
        options = tf.RunOptions()
        options.experimental.collective_graph_key = 7
        rng = np.random.default_rng(100 + task)
        fed, got = [], []
        with tf.Session(server.target, config=config) as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(steps):
                values = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
                fed.append(values)
                got.append(sess.run(reduced, options=options,
                                    feed_dict=dict(zip(feeds, values))))
    np.savez(out, **{f"fed_{s}_{j}": v for s, vals in enumerate(fed) for j, v in enumerate(vals)},
             **{f"got_{s}_{j}": v for s, vals in enumerate(got) for j, v in enumerate(vals)})


if __name__ == "__main__":
    main()
