"""Bytes sent and received per replica as the number of replicas W grows.

    PYTHONPATH=. .venv/bin/python benchmarks/bytes_by_replicas.py \\
        [--replicas 2,4,8] [--models mlp,resnet20,resnet50] [--configs all] [--json out.json]

For every (model, W) a FRESH process configures W logical CPU devices, builds
the model under MirroredStrategy(cross_device_ops=DeepReduceCrossDeviceOps(
params)), runs --steps custom training steps (synthetic data: bytes do not
depend on the values) and reads ops.step_bytes() after the last: the bytes
each replica sent and received in that step, exact from the accounting (the
all-reduce: a ring's 2 (W - 1) / W of the vector; the all-gather: the other
W - 1 payloads). Summable communicators (all-reduce, lgc_rar, powersgd) stay
flat in W; the all-gather's received bytes grow with W - 1.

Configurations: uncompressed (TensorFlow's ring all-reduce of the dense
gradients, as the ops account it), golomb_qsgd_dgc (the recommended
all-gather), sparse_allreduce (top-k 1 %: every worker's top-(k/W)
positions all-gathered, the values at their union all-reduced), sparse_max (the
same at 0.5 % over the whole bucket, int8 codes summed), lgc_rar (Learned Gradient Compression, ring-all-reduce variant,
after its warm-up and training phases: --steps must exceed them), powersgd
ranks 1 and 2.
"""
import argparse
import json
import os
import subprocess
import sys

CONFIGS = {
    "uncompressed": {"compressor": "none"},
    "golomb_qsgd_dgc": {"compressor": "topk", "compress_ratio": 0.01, "memory": "dgc",
                        "warmup_steps": 1, "warmup": "exponential", "deepreduce": "both",
                        "index": "golomb", "value": "qsgd", "bits": 7},
    "lgc_rar": {"compressor": "topk", "compress_ratio": 0.01, "communicator": "lgc_rar",
                "deepreduce": "both", "index": "golomb", "value": "fp16",
                "lgc_warmup_steps": 1, "lgc_train_steps": 1},
    "sparse_allreduce": {"compressor": "topk", "compress_ratio": 0.01, "memory": "dgc",
                         "warmup_steps": 1, "warmup": "exponential",
                         "communicator": "sparse_allreduce", "deepreduce": "both",
                         "index": "golomb", "value": "fp16"},
    "sparse_max": {"compressor": "topk", "compress_ratio": 0.005, "topk_scope": "bucket",
                   "min_size": 1, "memory": "dgc", "warmup_steps": 1, "warmup": "exponential",
                   "schedule": "cosine", "schedule_steps": 100,
                   "communicator": "sparse_allreduce", "deepreduce": "both", "index": "golomb",
                   "value": "int8"},
    "powersgd_r1": {"compressor": "powersgd", "rank": 1},
    "powersgd_r2": {"compressor": "powersgd", "rank": 2},
}
SHAPES = {"mlp": None, "resnet20": (32, 32, 3), "resnet50": (64, 64, 3)}


def _row(model_name, replicas, names, steps):
    """Inside the fresh process: one row per configuration."""
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    import keras

    from deepreduce_tf import distribute as drd

    devices = [f"/cpu:{i}" for i in range(replicas)]
    out = []
    for name in names:
        ops = drd.DeepReduceCrossDeviceOps(CONFIGS[name])
        drd.KerasState(ops)  # never resumed: no StateNotSavedWarning
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
        with strategy.scope():
            keras.utils.set_random_seed(0)
            if model_name == "mlp":
                model = keras.Sequential([keras.Input((784,)),
                                          keras.layers.Dense(256, activation="relu"),
                                          keras.layers.Dense(128, activation="relu"),
                                          keras.layers.Dense(10)])
                shape = (784,)
            else:
                from deepreduce_bench import models

                shape = SHAPES[model_name]
                model = (models.resnet20 if model_name == "resnet20" else models.resnet50)(
                    shape, 10)
            opt = keras.optimizers.SGD(0.01)
            opt.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                             reduction="none")

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        @tf.function
        def step(x, y):
            strategy.run(replica_step, args=(x, y))

        x = np.random.default_rng(0).normal(size=(2 * replicas,) + shape).astype(np.float32)
        y = np.zeros(2 * replicas, np.int32)
        dist = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(2 * replicas).repeat())
        it = iter(dist)
        for _ in range(steps):
            step(*next(it))
        b = ops.step_bytes()
        out.append({"model": model_name, "replicas": replicas, "config": name,
                    "dense_bytes": b["dense_bytes"], "sent_bytes": b["sent_bytes"],
                    "received_bytes": b["received_bytes"]})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="2,4,8")
    parser.add_argument("--models", default="mlp,resnet20")
    parser.add_argument("--configs", default="all")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = list(CONFIGS) if args.configs == "all" else args.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            parser.error(f"unknown configuration {n!r}; valid: {', '.join(CONFIGS)}")
    if args.child:
        model, replicas = args.child.split(":")
        print(json.dumps(_row(model, int(replicas), names, args.steps)))
        return 0
    rows = []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for model in args.models.split(","):
        for replicas in [int(r) for r in args.replicas.split(",")]:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", f"{model}:{replicas}", "--configs",
                 ",".join(names), "--steps", str(args.steps)],
                capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            rows += json.loads(proc.stdout.strip().splitlines()[-1])
    print("| model | configuration | W | dense B/replica | sent B/replica | received B/replica "
          "| received ÷ dense |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for r in sorted(rows, key=lambda r: (r["model"], names.index(r["config"]), r["replicas"])):
        print(f"| {r['model']} | {r['config']} | {r['replicas']} | {r['dense_bytes']:,} | "
              f"{r['sent_bytes']:,} | {r['received_bytes']:,} | "
              f"{r['received_bytes'] / r['dense_bytes']:.4f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
