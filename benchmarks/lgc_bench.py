"""Learned Gradient Compression: bytes per worker as the group grows, and the
autoencoder's cost.

    .venv/bin/python benchmarks/lgc_bench.py [--replicas=2,4,8] [--steps=...]

Part 1, bytes. ResNet-20's real gradients (one batch of random 32x32 images
per replica, a fresh batch every exchange) go through the exchange of each
configuration, R replicas in one process (communicators.Communicator.step
over a LocalTransport: what MirroredStrategy runs, and what R workers would
send and receive). Per replica and per exchange, in each LGC phase: bytes
SENT (the ledger) and RECEIVED from the others (all-gather: their payloads;
all-reduce: a ring's 2 (R - 1) / R of the vector). Rows: top-k 1 % with
golomb + QSGD 7 bit (all-gather, the recommended configuration), lgc_ps and
lgc_rar (top-k 1 %, golomb leader positions, fp16 values and latents).

Part 2, the autoencoder's cost on this machine: one Adam step of the
lgc_ps autoencoder (R decoders) and of lgc_rar's, and one encode + decode,
on ResNet-20's k values, median of --repeats after 3 warm-up calls.

Part 3 (--transfer_steps > 0), the autoencoder on gradients of another run:
run A trains ResNet-20 on Fashion-MNIST (2 replicas, SGD, seed 0) through
lgc_ps for --transfer_steps exchanges (10 warm-up, the rest training the
autoencoder); run B trains another ResNet-20 (seed 1, other initial weights
and batches) with plain averaging. From the last 10 steps of each run, the
replicas' gradients at the leader's top-k positions (without residuals) are
reconstructed by run A's autoencoder as the receivers would (leader's latent
through node i's decoder, node i's innovation over it): relative error of
the sum and mean relative error per node; also run A's autoencoder before
training (the identity start: every node a copy of the leader) on run B.

Prints the tables; absolute times depend on the load of the machine.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

flags.DEFINE_list("replicas", ["2", "4", "8"], "group sizes to measure")
flags.DEFINE_integer("warmup", 2, "lgc_warmup_steps of the LGC rows")
flags.DEFINE_integer("train", 3, "lgc_train_steps of the LGC rows")
flags.DEFINE_integer("repeats", 20, "timed calls of part 2")
flags.DEFINE_integer("transfer_steps", 0, "part 3: exchanges of run A (0: skip part 3)")
flags.DEFINE_list("parts", ["bytes", "autoencoder", "transfer"], "which parts to run")
FLAGS = flags.FLAGS

BASE = {"compressor": "topk", "compress_ratio": 0.01, "deepreduce": "both",
        "index": "golomb"}
CONFIGS = {
    "golomb_qsgd (all-gather)": dict(BASE, value="qsgd", bits=7),
    "lgc_ps": dict(BASE, value="fp16", communicator="lgc_ps"),
    "lgc_rar": dict(BASE, value="fp16", communicator="lgc_rar"),
}


def _grads(model, rng, tf):
    x = tf.constant(rng.normal(size=(32, 32, 32, 3)).astype("float32"))
    y = tf.constant(rng.integers(0, 10, size=32))
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
            y, logits, from_logits=True))
    return tape.gradient(loss, model.trainable_variables)


def part_bytes(replicas):
    import numpy as np
    import tensorflow as tf

    import deepreduce_tf as dr
    from deepreduce_bench import models
    from deepreduce_tf.transport import LocalTransport

    model = models.resnet20()
    keys = [f"{i}/{v.name}" for i, v in enumerate(model.trainable_variables)]
    dense = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)
    steps = FLAGS.warmup + FLAGS.train + 2
    phase_of = ["1 warm-up"] * FLAGS.warmup + ["2 training"] * FLAGS.train + [
        "3 compressed (first: + weights)", "3 compressed"]
    rows = []
    for name, params in CONFIGS.items():
        for r in replicas:
            extra = ({"lgc_warmup_steps": FLAGS.warmup, "lgc_train_steps": FLAGS.train}
                     if "communicator" in params else {})
            comps = [dr.from_params(dict(params, **extra)) for _ in range(r)]
            comm = comps[0].communicator
            transport = LocalTransport(["/cpu:0"] * r)
            step = tf.function(lambda g, comps=comps, comm=comm, transport=transport:
                               comm.step(transport, comps, g, keys))
            rng = np.random.default_rng(0)
            for t in range(steps):
                grads = [_grads(model, rng, tf) for _ in range(r)]
                step(grads)
                if "communicator" not in params and t < steps - 1:
                    continue
                sent = [c.ledger.step_totals()[0] for c in comps]
                got = [c.ledger.received_totals()[0] for c in comps]
                label = phase_of[t] if "communicator" in params else "every exchange"
                rows.append((name, r, label, sent[0], sent[-1], got[-1], dense))
    print(f"\nPart 1: bytes per replica per exchange, ResNet-20 ({dense:,} B dense per replica)")
    print(f"{'configuration':<26} {'R':>2} | {'phase':<32} | {'sent, leader':>12} | "
          f"{'sent, other':>11} | {'received, other':>15}")
    seen = set()
    for name, r, label, s0, s1, g1, _ in rows:
        if (name, r, label) in seen:  # one row per phase
            continue
        seen.add((name, r, label))
        print(f"{name:<26} {r:>2} | {label:<32} | {s0:>12,} | {s1:>11,} | {g1:>15,}")


def part_autoencoder(replicas):
    import numpy as np
    import tensorflow as tf

    from deepreduce_bench import models
    from deepreduce_tf.learned import lgc
    from deepreduce_tf.learned.autoencoder import Autoencoder
    from deepreduce_tf.memory import default_variable_factory
    from deepreduce_tf.ops import sparsify as sparsify_ops

    model = models.resnet20()
    lengths = [int(np.prod(v.shape)) for v in model.trainable_variables
               if int(np.prod(v.shape)) >= 1024]
    k = int(sum(sparsify_ops.segment_ks(lengths, 0.01)))
    print(f"\nPart 2: the autoencoder on ResNet-20's k = {k:,} values (top-k 1 %), "
          f"default channels, median of {FLAGS.repeats} calls")
    print(f"{'variant':<8} {'R':>2} | {'weights':>9} | {'Adam step ms':>12} | "
          f"{'encode+decode ms (one node)':>27}")
    rng = np.random.default_rng(0)
    for variant, cls in (("lgc_ps", lgc.LgcPS), ("lgc_rar", lgc.LgcRAR)):
        for r in replicas:
            comm = cls()
            ae = Autoencoder(comm.ae_kind, r if comm.per_node_decoders else 1, comm.channels,
                             comm.latent_channels, comm.lr, 0, default_variable_factory,
                             identity_init=True)
            data = tf.constant(rng.normal(size=(r if comm.per_node_decoders else 1, k))
                               .astype("float32"))
            train = tf.function(lambda d, ae=ae, comm=comm: ae.train_step(
                lambda: comm.loss(ae, d, k)))
            infer = tf.function(lambda d, ae=ae: ae.decode(ae.encode(d[:1]), k, 0))
            times = {}
            for label, fn in (("train", train), ("infer", infer)):
                for _ in range(3):
                    fn(data)
                ts = []
                for _ in range(FLAGS.repeats):
                    t0 = time.perf_counter()
                    out = fn(data)
                    float(tf.reduce_sum(out))
                    ts.append(time.perf_counter() - t0)
                times[label] = 1000 * float(np.median(ts))
            print(f"{variant:<8} {r:>2} | {ae.num_weights():>9,} | {times['train']:>12.1f} | "
                  f"{times['infer']:>27.1f}")


def part_transfer(steps, replicas=2, capture=10):
    import numpy as np
    import tensorflow as tf

    import deepreduce_tf as dr
    from deepreduce_bench import data as drdata
    from deepreduce_bench import models
    from deepreduce_tf.learned.autoencoder import Autoencoder
    from deepreduce_tf.memory import default_variable_factory
    from deepreduce_tf.transport import LocalTransport

    ds = drdata.load_fashion_mnist("train", limit=20000)
    images = drdata.to_resnet_input(ds.images)
    labels = ds.labels.astype("int64")
    params = dict(BASE, value="fp16", communicator="lgc_ps", lgc_warmup_steps=10,
                  lgc_train_steps=steps - 10)

    def train(seed, lgc):
        tf.keras.utils.set_random_seed(seed)
        model = models.resnet20()
        keys = [f"{i}/{v.name}" for i, v in enumerate(model.trainable_variables)]
        opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
        comps = [dr.from_params(params) for _ in range(replicas)]
        comm = comps[0].communicator
        transport = LocalTransport(["/cpu:0"] * replicas)

        def grads_of(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                    y, model(x, training=True), from_logits=True))
            return tape.gradient(loss, model.trainable_variables)

        @tf.function
        def step(xs, ys):
            grads = [grads_of(xs[r], ys[r]) for r in range(replicas)]
            if lgc:
                summed = comm.step(transport, comps, grads, keys)[0]
            else:
                summed = [tf.add_n(list(g)) for g in zip(*grads)]
            opt.apply_gradients(zip([g / replicas for g in summed], model.trainable_variables))
            return grads

        rng = np.random.default_rng(seed)
        captured = []
        for t in range(steps):
            idx = rng.integers(0, len(labels), size=(replicas, 32))
            grads = step(tf.constant(images[idx]), tf.constant(labels[idx]))
            if t >= steps - capture:
                plan = comps[0].plan(keys, grads[0])
                captured.append([plan.pack(list(g))[0][:plan.buckets[0].sparse_n].numpy()
                                 for g in grads])
        return comps, comm, plan, captured

    def errors(comm, ae, plan, captured):
        bucket = plan.buckets[0]
        sp = dr.from_params(params).sparsifier
        out_sum, out_node = [], []
        for flats in captured:
            pos = sp.select_segments(tf.constant(flats[0]), bucket.lengths, 0).numpy()
            v = np.stack([f[pos] for f in flats])
            s = np.sqrt(np.mean(v[0] ** 2))
            rec = comm.reconstruct(ae, tf.constant(v / s, tf.float32), len(pos)).numpy() * s
            out_sum.append(np.sum((rec.sum(0) - v.sum(0)) ** 2) / np.sum(v.sum(0) ** 2))
            out_node.append(np.mean(np.sum((rec - v) ** 2, 1) / np.sum(v ** 2, 1)))
        return float(np.mean(out_sum)), float(np.mean(out_node))

    comps, comm, plan_a, own = train(0, True)
    _, _, plan_b, other = train(1, False)
    ae = comps[0].communicator_state.autoencoder
    fresh = Autoencoder(comm.ae_kind, replicas, comm.channels, comm.latent_channels, comm.lr, 0,
                        default_variable_factory, identity_init=True)
    print(f"\nPart 3: lgc_ps's autoencoder after {steps - 10} training exchanges (ResNet-20, "
          f"Fashion-MNIST, {replicas} replicas); last {capture} steps of each run")
    print(f"{'autoencoder':<34} {'gradients':<22} | {'sum rel. error':>14} | "
          f"{'node rel. error':>15}")
    for label, a, plan, cap, which in (("trained in run A", ae, plan_a, own, "run A (its own)"),
                                       ("trained in run A", ae, plan_b, other, "run B (another)"),
                                       ("untrained (identity start)", fresh, plan_b, other,
                                        "run B (another)")):
        e_sum, e_node = errors(comm, a, plan, cap)
        print(f"{label:<34} {which:<22} | {e_sum:>14.3f} | {e_node:>15.3f}")


def main(_):
    replicas = [int(r) for r in FLAGS.replicas]
    if "bytes" in FLAGS.parts:
        part_bytes(replicas)
    if "autoencoder" in FLAGS.parts:
        part_autoencoder(replicas)
    if FLAGS.transfer_steps and "transfer" in FLAGS.parts:
        part_transfer(FLAGS.transfer_steps)


if __name__ == "__main__":
    sys.exit(app.run(main))
