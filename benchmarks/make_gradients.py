"""Produces real gradients: trains a CIFAR-style ResNet-20 on Fashion-MNIST
(padded to 32x32x3) with SGD + momentum for a few hundred steps and saves the
per-variable gradients of the last step (and optionally of earlier snapshot
steps) to an .npz file that benchmarks/codec_bench.py reads.

    .venv/bin/python benchmarks/make_gradients.py [--steps 300] [--out build/gradients.npz]

(--out defaults to build/gradients.npz in the repository; build/ is git-ignored).

Data: the Debian package dataset-fashion-mnist (REFERENCE 4); without it the
script says so loudly and trains on synthetic images (the .npz records the
source). It prints the test accuracy reached so one can see the gradients
come from a network that learns.

.npz layout: for each snapshot step S and trainable variable with path P,
key "step{S:06d}/{P}" holds the float32 gradient (the variable's shape) of
the mini-batch loss (mean cross-entropy + L2 weight decay) at step S, taken
before that step's update; key "meta" holds a JSON string (steps, data
source, accuracy, hyper-parameters, variable order).
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

from deepreduce_bench import data, models  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "build", "gradients.npz")


def snapshot_steps(steps, count):
    """`count` steps evenly spaced in [1, steps], always including the last."""
    count = max(1, min(count, steps))
    return sorted({int(round(steps * (i + 1) / count)) for i in range(count)})


def evaluate(model, images, labels, batch=500):
    correct = 0
    for i in range(0, len(images), batch):
        x = data.to_resnet_input(images[i:i + batch])
        logits = model(x, training=False)
        correct += int(np.sum(np.argmax(logits.numpy(), axis=1) == labels[i:i + batch]))
    return correct / max(1, len(images))


def train(steps=300, batch_size=128, learning_rate=0.05, momentum=0.9, weight_decay=1e-4,
          snapshots=1, test_examples=2000, seed=0, data_dir=None, log=sys.stdout):
    """Trains ResNet-20 and returns (gradient snapshots, metadata dict).

    Snapshots: {step: {variable path: float32 gradient}}.
    """
    keras.utils.set_random_seed(seed)
    train_set = data.load_fashion_mnist("train", data_dir=data_dir, seed=seed)
    test_set = data.load_fashion_mnist("test", data_dir=data_dir, limit=test_examples,
                                       seed=seed)
    model = models.resnet20(weight_decay=weight_decay)
    variables = model.trainable_variables
    optimizer = keras.optimizers.SGD(learning_rate=learning_rate, momentum=momentum)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(reduce_retracing=True)
    def step_fn(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
            total = loss + tf.add_n(model.losses) if model.losses else loss
        grads = tape.gradient(total, variables)
        optimizer.apply_gradients(zip(grads, variables))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y),
                                     tf.float32))
        return loss, acc, grads

    wanted = set(snapshot_steps(steps, snapshots))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train_set.labels))
    saved, pos, t0 = {}, 0, time.perf_counter()
    recent_acc = []
    for step in range(1, steps + 1):
        if pos + batch_size > len(order):
            order, pos = rng.permutation(len(train_set.labels)), 0
        idx = order[pos:pos + batch_size]
        pos += batch_size
        x = data.to_resnet_input(train_set.images[idx])
        y = train_set.labels[idx].astype(np.int32)
        loss, acc, grads = step_fn(tf.constant(x), tf.constant(y))
        recent_acc = (recent_acc + [float(acc)])[-20:]
        if step in wanted:
            saved[step] = {v.path: g.numpy().astype(np.float32) for v, g in zip(variables, grads)}
        if log is not None and (step % 50 == 0 or step == steps or step == 1):
            print(f"step {step:5d}  loss {float(loss):.4f}  train acc (last 20 batches) "
                  f"{np.mean(recent_acc):.3f}  {time.perf_counter() - t0:6.1f} s", file=log)
    train_seconds = time.perf_counter() - t0
    test_acc = evaluate(model, test_set.images, test_set.labels)
    meta = {
        "model": "resnet20", "dataset": "fashion-mnist (32x32x3 padded)",
        "data_source": train_set.source, "steps": steps, "batch_size": batch_size,
        "optimizer": f"SGD(lr={learning_rate}, momentum={momentum})",
        "weight_decay": weight_decay, "seed": seed, "snapshot_steps": sorted(saved),
        "train_seconds": round(train_seconds, 1),
        "train_accuracy_last20": round(float(np.mean(recent_acc)), 4),
        "test_accuracy": round(test_acc, 4), "test_examples": len(test_set.labels),
        "variables": [v.path for v in variables],
        "num_params": int(sum(int(np.prod(v.shape)) for v in variables)),
        "tensorflow": tf.__version__, "cpus": os.cpu_count(),
    }
    return saved, meta


def save(path, snapshots, meta):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    arrays = {f"step{s:06d}/{name}": g for s, grads in snapshots.items()
              for name, g in grads.items()}
    np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)


def load(path, step=None):
    """(gradients {variable path: array} of one snapshot step, meta) from an .npz.

    step: the snapshot step to return; default the last one.
    """
    with np.load(path, allow_pickle=False) as f:
        meta = json.loads(str(f["meta"]))
        steps = meta["snapshot_steps"]
        step = steps[-1] if step is None else step
        if step not in steps:
            raise ValueError(f"{path} has no snapshot of step {step}; it has {steps}")
        prefix = f"step{step:06d}/"
        grads = {name: f[prefix + name] for name in meta["variables"]}
    return grads, dict(meta, step=step)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--snapshots", type=int, default=1,
                   help="number of steps whose gradients are saved, evenly spaced, "
                        "ending with the last")
    p.add_argument("--test-examples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None,
                   help=f"directory of the IDX files (default ${data.ENV_VAR}, then "
                        f"{data.DEBIAN_DIR})")
    p.add_argument("--out", default=DEFAULT_OUT)
    a = p.parse_args(argv)
    snaps, meta = train(a.steps, a.batch_size, a.lr, a.momentum, a.weight_decay, a.snapshots,
                        a.test_examples, a.seed, a.data_dir)
    save(a.out, snaps, meta)
    print(f"data: {meta['data_source']}; {meta['steps']} steps of batch {meta['batch_size']} "
          f"in {meta['train_seconds']} s; test accuracy {meta['test_accuracy']:.4f} on "
          f"{meta['test_examples']} images (chance 0.1)")
    print(f"saved gradients of steps {meta['snapshot_steps']} "
          f"({len(meta['variables'])} variables, {meta['num_params']:,} elements) to {a.out}")
    return meta


if __name__ == "__main__":
    main()
