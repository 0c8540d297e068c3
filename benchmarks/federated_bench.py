"""Federated learning through Flower's simulation engine: FedAvg against
DeepReduce-compressed FedAvg in both directions (docs/federated.md).

    python benchmarks/federated_bench.py --rounds=50
    python benchmarks/federated_bench.py --configs=fedavg,golomb_qsgd --rounds=5 --clients=20

Fashion-MNIST (the Debian package dataset-fashion-mnist; synthetic data with a
notice without it) split non-IID over --clients clients by a Dirichlet(alpha)
draw per class (the usual LDA split), --per_round sampled per round, each
training a small CNN for --epochs local epochs (SGD). The server evaluates the
global model on the test split. Every configuration runs in its own process
(one Flower simulation each) with the same seed: same split, same initial
model (built before the simulation starts), same local training seeds per
client and round; which clients are sampled differs between runs (Flower
samples node ids, which are random per run). Prints one table (bytes per direction relative
to FedAvg, test accuracy) and writes the JSON and a plot of test accuracy
against total bytes. Column "version": a downlink version's payload relative
to the dense model, i.e. the downlink ratio if every client received every
version (DeepReduce's paper's accounting); "down vs FedAvg" is what the
sampled clients actually needed (dense at first contact, then the chain of
versions they missed).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

CONFIGS = {
    "fedavg": None,
    "topk": {"compressor": "topk", "compress_ratio": 0.1},
    "bloom_p0": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "index",
                 "index": "bloom", "policy": "p0"},
    "bloom_p0_polyfit": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
                         "index": "bloom", "policy": "p0", "value": "polyfit"},
    "qsgd_bloom_p0": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
                      "index": "bloom", "policy": "p0", "value": "qsgd"},
    "golomb_qsgd": {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
                    "index": "golomb", "value": "qsgd"},
}
DESCRIPTIONS = {
    "fedavg": "FedAvg, dense both ways",
    "topk": "top-r 10 % + residual, raw int32 indices, fp32 values",
    "bloom_p0": "top-r 10 %, Bloom-P0 indices, fp32 values",
    "bloom_p0_polyfit": "top-r 10 %, Bloom-P0 indices, polyfit values",
    "qsgd_bloom_p0": "top-r 10 %, Bloom-P0 indices, QSGD 8-bit values",
    "golomb_qsgd": "top-r 10 %, golomb indices (lossless), QSGD 8-bit values",
}


def dirichlet_split(labels, clients, alpha, seed):
    """Per class, its examples are shared among the clients in Dirichlet(alpha)
    proportions. Returns one index array per client."""
    rng = np.random.default_rng(seed)
    parts = [[] for _ in range(clients)]
    for c in range(int(labels.max()) + 1):
        idx = rng.permutation(np.flatnonzero(labels == c))
        shares = rng.dirichlet([alpha] * clients)
        cuts = (np.cumsum(shares)[:-1] * len(idx)).astype(int)
        for part, chunk in zip(parts, np.split(idx, cuts)):
            part.extend(chunk.tolist())
    return [np.sort(np.array(p, np.int64)) for p in parts]


def build_model():
    import keras

    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10)])


def compile_model(model, lr):
    import keras

    model.compile(optimizer=keras.optimizers.SGD(lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def run_one(args):
    """One configuration: a Flower simulation; prints RESULT <json>."""
    import keras
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    from deepreduce_tf.data import load_fashion_mnist
    from deepreduce_tf.federated import DeepReduceStrategy, deepreduce_mod

    params = CONFIGS[args.one]
    cache = {}
    # The initial model, before any other thread runs TensorFlow ops.
    keras.utils.set_random_seed(args.seed)
    initial = build_model().get_weights()

    def client_data(pid):
        if "train" not in cache:
            train = load_fashion_mnist("train", stream=None)
            cache["train"] = train
            cache["parts"] = dirichlet_split(train.labels, args.clients, args.alpha, args.seed)
            cache["model"] = compile_model(build_model(), args.lr)
        train, idx = cache["train"], cache["parts"][pid]
        return (train.images[idx, :, :, None].astype(np.float32) / 255.0,
                train.labels[idx].astype(np.int64))

    client = ClientApp(mods=[deepreduce_mod])

    @client.train()
    def train(msg, context):
        pid = int(context.node_config["partition-id"])
        x, y = client_data(pid)
        model = cache["model"]
        model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
        rnd = int(msg.content["config"]["server-round"])
        keras.utils.set_random_seed(args.seed * 1_000_003 + rnd * 1009 + pid)
        if len(x):
            model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, verbose=0)
        return Message(RecordDict({"arrays": ArrayRecord(model.get_weights()),
                                   "metrics": MetricRecord({"num-examples": max(len(x), 1)})}),
                       reply_to=msg)

    server = ServerApp()
    out = {}

    @server.main()
    def main(grid, context):
        test = load_fashion_mnist("test", stream=None)
        tx = test.images[:, :, :, None].astype(np.float32) / 255.0
        ty = test.labels.astype(np.int64)
        model = compile_model(build_model(), args.lr)
        curve = []

        def evaluate(rnd, arrays):
            if rnd % args.eval_every and rnd != args.rounds:
                return None
            model.set_weights(arrays.to_numpy_ndarrays())
            _, acc = model.evaluate(tx, ty, batch_size=1000, verbose=0)
            curve.append({"round": rnd, "accuracy": float(acc),
                          "bytes": sum(r["down_bytes"] + r["up_bytes"]
                                       for r in rows()[:rnd])})
            print(f"[{args.one}] round {rnd}: test accuracy {acc:.4f}", file=sys.stderr,
                  flush=True)
            return MetricRecord({"accuracy": float(acc)})

        fedavg = FedAvg(fraction_train=args.per_round / args.clients,
                        min_train_nodes=args.per_round, min_available_nodes=args.clients,
                        fraction_evaluate=0.0)
        strategy = fedavg if params is None else DeepReduceStrategy(fedavg, params)
        dense = sum(w.nbytes for w in initial)
        fedavg_rows = []

        def rows():
            if params is not None:
                return strategy.rounds
            return fedavg_rows

        if params is None:  # FedAvg's bytes: the dense model per message, each way
            configure = fedavg.configure_train

            def counted(rnd, arrays, config, grid_):
                messages = list(configure(rnd, arrays, config, grid_))
                fedavg_rows.append({"round": rnd, "down_messages": len(messages),
                                    "down_bytes": dense * len(messages),
                                    "up_messages": len(messages),
                                    "up_bytes": dense * len(messages), "rejected": 0,
                                    "dense_bytes": dense})
                return messages

            fedavg.configure_train = counted
        start = time.perf_counter()
        strategy.start(grid=grid, initial_arrays=ArrayRecord(initial), num_rounds=args.rounds,
                       evaluate_fn=evaluate)
        out.update(config=args.one, params=params, description=DESCRIPTIONS[args.one],
                   rounds=rows(), curve=curve, dense_bytes=dense,
                   rejected=getattr(strategy, "rejected", []),
                   wall_s=time.perf_counter() - start)

    run_simulation(server_app=server, client_app=client, num_supernodes=args.clients,
                   backend_config={"client_resources": {"num_cpus": 1}})
    print("RESULT " + json.dumps(out))


def table(results):
    base = next((r for r in results if r["config"] == "fedavg"), None)
    lines = [f"{'configuration':<18} | {'down B/round':>12} | {'up B/round':>11} | "
             f"{'down vs FedAvg':>14} | {'version':>7} | {'up vs FedAvg':>12} | "
             f"{'total':>6} | {'test acc.':>9} | {'vs FedAvg':>9}"]
    for r in results:
        rounds = r["rounds"]
        down = sum(x["down_bytes"] for x in rounds)
        up = sum(x["up_bytes"] for x in rounds)
        fed_down = r["dense_bytes"] * sum(x["down_messages"] for x in rounds)
        fed_up = r["dense_bytes"] * sum(x["up_messages"] for x in rounds)
        versions = sum(x.get("versions", 0) for x in rounds)
        version = (sum(x.get("version_bytes", 0) for x in rounds) / (versions * r["dense_bytes"])
                   if versions else 1.0)
        acc = r["curve"][-1]["accuracy"] if r["curve"] else math.nan
        delta = (f"{100 * (acc - base['curve'][-1]['accuracy']):+.2f} pts"
                 if base and base["curve"] else "-")
        lines.append(f"{r['config']:<18} | {down / len(rounds):>12,.0f} | "
                     f"{up / len(rounds):>11,.0f} | {down / fed_down:>14.4f} | "
                     f"{version:>7.4f} | {up / fed_up:>12.4f} | "
                     f"{(down + up) / (fed_down + fed_up):>6.4f} | "
                     f"{acc:>9.4f} | {delta:>9}")
    return "\n".join(lines)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        points = [c for c in r["curve"] if c["bytes"] > 0]  # round 0: nothing sent yet
        ax.plot([c["bytes"] / 2 ** 20 for c in points], [c["accuracy"] for c in points],
                marker="o", ms=3, label=r["config"])
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent, both directions, cumulative (MiB, log scale)")
    ax.set_ylabel("test accuracy (Fashion-MNIST, 10,000 images)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--per_round", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--out", default="federated_bench.json")
    parser.add_argument("--plot", default="federated_bench.png")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        return run_one(args)
    names = [c for c in args.configs.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; valid: {', '.join(CONFIGS)}")
    results = []
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    for name in names:
        cmd = [sys.executable, os.path.abspath(__file__), f"--one={name}"] + [
            a for a in (argv if argv is not None else sys.argv[1:])
            if not a.startswith(("--configs", "--one", "--out", "--plot"))]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            sys.exit(f"{name} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        results.append(json.loads(lines[-1][len("RESULT "):]))
        print(f"{name}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    record = {"command": "benchmarks/federated_bench.py " + " ".join(sys.argv[1:]),
              "settings": {k: v for k, v in vars(args).items() if k != "one"},
              "results": results}
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    plot(results, args.plot)
    print(table(results))
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
