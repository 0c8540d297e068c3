"""Federated learning through Flower's simulation engine: FedAvg against
DeepReduce-compressed FedAvg in both directions (docs/federated.md).

    python benchmarks/federated_bench.py --configs=baseline,recommended --seed=10
    python benchmarks/federated_bench.py --configs=fedavg,golomb_qsgd --rounds=5 --clients=20
    python benchmarks/federated_bench.py --configs=fedavg@fedavgm,golomb_qsgd2_r22@fedavgm
    python benchmarks/federated_bench.py --task=ncf --per_round=50 --lr=0.005 --epochs=2

The defaults are the standard setup of docs/federated.md ("Measured:
Fashion-MNIST, 100 non-IID clients"): --rounds=200 --eval_every=10
--downlink=per_node --initial_on_clients --min_size=100 (the page's 100-round
figures add --rounds=100).
`--configs=baseline,recommended --seed=S` with no other flag reproduces the
page's headline on seed S: the aliases of ALIASES name the configuration the
page recommends and its uncompressed counterpart.

--task=ncf: NeuMF on MovieLens-100K with one client per user (see
MovieLensNCF); the rest of this text describes --task=fmnist, the default.

Fashion-MNIST (the Debian package dataset-fashion-mnist; synthetic data with a
notice without it) split non-IID over --clients clients by a Dirichlet(alpha)
draw per class (the usual LDA split), --per_round sampled per round, each
training a small CNN for --epochs local epochs (SGD). The server evaluates the
global model on the test split. Every configuration runs in its own process
(one Flower simulation each) with the same seed: same split, same initial
model (built before the simulation starts), same clients sampled in each
round (FedAvg's sampling seeded per round over the node ids in sorted order;
the k-th smallest node id trains partition k: Flower's node ids are random
per run), same local training seeds per client and round. Prints one table
(bytes per direction relative to FedAvg, test accuracy) and writes the JSON
and a plot of test accuracy against total bytes.

--downlink=versions: the server's versions, a sampled client gets
the chain of versions it missed or the dense model (first contact); column
"version" is a version's payload relative to the dense model, i.e. the
downlink ratio if every client received every version (DeepReduce's paper's
accounting). --downlink=per_node (default): one payload per message, the
difference between the model and what that client holds; with
--initial_on_clients (the default with per_node; --no-initial_on_clients
turns it off) the clients rebuild the initial model from the seed, so no
message is dense. --min_size=N: tensors under N elements travel dense
(default 100: every weight tensor of the CNN is compressed, as the paper's
Algorithm 2 compresses every tensor of more than one dimension; 1024 is the
library's default).

This script is the command line and the run loop (one process per
configuration, one Flower simulation in each); beside it,
federated_configs.py holds the configurations, federated_tasks.py the
tasks, their data split and the clients' local training, and
federated_report.py the tables and plots of the records.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

# Its parts, beside this script (run as a script, its directory is on sys.path
# already; loaded by path, it is not).
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from federated_configs import (ALIASES, CONFIGS, DESCRIPTIONS, SERVER_CONFIGS,  # noqa: E402
                               SERVERS, known, make_strategy, resolve, split_name)
from federated_report import (LOCAL_TRAINING, as_of_round, check_same_setup,  # noqa: E402
                              frontier_plot, frontier_points, frontier_table, plot,
                              seeds_table, table)
from federated_tasks import TASKS, LocalSGD, round_lr  # noqa: E402

# The page's standard flags, the defaults of main()'s parser.
STANDARD_FLAGS = {"rounds": 200, "eval_every": 10, "downlink": "per_node",
                  "initial_on_clients": True, "min_size": 100}


class SortedGrid:
    """A Flower Grid whose node ids come in sorted order (what FedAvg
    samples from)."""

    def __init__(self, grid, ids):
        self._grid, self._ids = grid, ids

    def get_node_ids(self):
        return list(self._ids)

    def __getattr__(self, name):
        return getattr(self._grid, name)


def seeded_sampling(fedavg, seed, on_messages=None):
    """Makes FedAvg's sampling the same in every run whatever the node ids:
    seeded per round, over the node ids in sorted order; each message's
    config gets 'partition', the node's rank in that order (the data it
    trains). on_messages(round, messages) sees each round's messages."""
    from flwr.app import ConfigRecord, RecordDict

    configure = fedavg.configure_train

    def sampled(rnd, arrays, config, grid):
        ids = sorted(grid.get_node_ids())
        partition = {n: k for k, n in enumerate(ids)}
        random.seed(seed * 1_000_003 + rnd)
        messages = list(configure(rnd, arrays, config, SortedGrid(grid, ids)))
        for m in messages:  # FedAvg's messages share one RecordDict
            content = RecordDict(dict(m.content.items()))
            content["config"] = ConfigRecord(
                dict(m.content["config"], partition=partition[m.metadata.dst_node_id]))
            m.content = content
        if on_messages is not None:
            on_messages(rnd, messages)
        return messages

    fedavg.configure_train = sampled


def data_source(task):
    """'fashion-mnist' or 'synthetic' (the clients' fallback when the dataset
    is not installed) for --task=fmnist; 'movielens' for ncf (which refuses
    to run without its data)."""
    if task != "fmnist":
        return "movielens"
    from deepreduce_bench.data import find_fashion_mnist

    return "fashion-mnist" if find_fashion_mnist() else "synthetic"


def watch_replies(strategy):
    """Returns a list that collects (round, reason) for every reply that is an
    error (a client that raised), as the strategy receives them."""
    failed = []
    aggregate = strategy.aggregate_train

    def watched(rnd, replies):
        replies = list(replies)
        failed.extend((rnd, m.error.reason) for m in replies if m.has_error())
        return aggregate(rnd, replies)

    strategy.aggregate_train = watched
    return failed


def process_env(environ):
    """The environment of a configuration's process, from `environ`: one
    TensorFlow thread per process unless `environ` says otherwise (the
    simulation runs one client actor per core, and more threads than cores
    only contend: 40 rounds took 113 s against 132 s with TensorFlow's
    default pools, side by side on 2 cores), and the op library of the
    imported package."""
    return installed_ops_env(dict({"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"},
                                  **environ, RAY_DISABLE_USAGE_STATS="1"))


def installed_ops_env(env):
    """The environment for a configuration's process. Flower's simulation
    workers start in the current directory: from the repository root they
    would import the source tree's deepreduce_tf, which holds no compiled
    library; point them at the library of the deepreduce_tf this process
    imports (the installed one), unless DEEPREDUCE_TF_OPS_LIB is set."""
    import importlib.util

    if env.get("DEEPREDUCE_TF_OPS_LIB"):
        return env
    spec = importlib.util.find_spec("deepreduce_tf")
    if spec is None or not spec.origin:
        return env
    lib = os.path.join(os.path.dirname(spec.origin), "ops", "_deepreduce_ops.so")
    return dict(env, DEEPREDUCE_TF_OPS_LIB=lib) if os.path.exists(lib) else env


def run_one(args):
    """One configuration: a Flower simulation; prints RESULT <json>."""
    import keras
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from deepreduce_tf.federated import DeepReduceMod, DeepReduceStrategy, RowwiseMean

    compression, server_opt = split_name(args.one)
    params = CONFIGS[compression]
    server_params = SERVER_CONFIGS.get(compression)
    if params is not None and args.min_size is not None:
        params = dict(params, min_size=args.min_size)
        if server_params is not None:
            server_params = dict(server_params, min_size=args.min_size)
    task = TASKS[args.task](args)
    # What a client process keeps between messages (its data, its compiled
    # model): Flower's simulation ships the ClientApp to its actors anew with
    # every message, so a dict in this closure would be a fresh copy each time.
    cache_key = ("federated_bench", args.one, args.task, args.seed, args.clients, args.alpha)
    # The initial model, before any other thread runs TensorFlow ops.
    keras.utils.set_random_seed(args.seed)
    first = task.build_model()
    initial = first.get_weights()
    rowwise = task.rowwise_keys(first)

    def initial_model():  # what a client rebuilds from the seed, once per process
        from deepreduce_bench.workers import process_cache

        cache = process_cache(cache_key)
        if "initial" not in cache:  # setting the seed clears TensorFlow's caches
            keras.utils.set_random_seed(args.seed)
            cache["initial"] = task.build_model().get_weights()
        return cache["initial"]

    client = ClientApp(mods=[DeepReduceMod(initial_model=initial_model)])

    @client.train()
    def train(msg, context):
        from deepreduce_bench.workers import process_cache

        cache = process_cache(cache_key)
        pid = int(msg.content["config"]["partition"])
        x, y = cache.setdefault("task", task).client_data(pid)
        if "model" not in cache:
            cache["model"] = task.compile(task.build_model())
            cache["fit"] = LocalSGD(cache["model"])
        model = cache["model"]
        model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
        for v in model.optimizer.variables:  # a fresh optimizer state per client and round
            if not v.path.endswith("learning_rate"):
                v.assign(np.zeros(v.shape, v.dtype))
        rnd = int(msg.content["config"]["server-round"])
        if args.lr_schedule != "constant":
            model.optimizer.learning_rate.assign(
                round_lr(args.lr, args.lr_schedule, rnd, args.rounds, args.lr_min_ratio))
        cache["fit"](x, y, args.batch_size, args.epochs,
                     seed=args.seed * 1_000_003 + rnd * 1009 + pid)
        return Message(RecordDict({"arrays": ArrayRecord(model.get_weights()),
                                   "metrics": MetricRecord({"num-examples": max(len(y), 1)})}),
                       reply_to=msg)

    server = ServerApp()
    out = {}

    @server.main()
    def main(grid, context):
        model = task.compile(task.build_model())
        score = task.evaluator()
        curve = []

        def evaluate(rnd, arrays):
            if rnd % args.eval_every and rnd != args.rounds:
                return None
            model.set_weights(arrays.to_numpy_ndarrays())
            value = score(model)
            curve.append({"round": rnd, task.metric: value,
                          "bytes": sum(r["down_bytes"] + r["up_bytes"]
                                       for r in rows()[:rnd])})
            print(f"[{args.one}] round {rnd}: test {task.metric} {value:.4f}", file=sys.stderr,
                  flush=True)
            return MetricRecord({task.metric: value})

        fedavg = make_strategy(server_opt, fraction_train=args.per_round / task.num_clients,
                               min_train_nodes=args.per_round,
                               min_available_nodes=task.num_clients, fraction_evaluate=0.0)
        inner = RowwiseMean(fedavg, rowwise) if rowwise else fedavg
        strategy = inner if params is None else DeepReduceStrategy(
            inner, params, server_params=server_params, downlink=args.downlink,
            initial_on_clients=args.initial_on_clients)
        dense = sum(w.nbytes for w in initial)
        fedavg_rows = []

        def rows():
            if params is not None:
                return strategy.rounds
            return fedavg_rows

        def counted(rnd, messages):
            if params is None:  # FedAvg's bytes: the dense model per message, each way
                fedavg_rows.append({"round": rnd, "down_messages": len(messages),
                                    "down_bytes": dense * len(messages),
                                    "up_messages": len(messages),
                                    "up_bytes": dense * len(messages), "rejected": 0,
                                    "dense_bytes": dense})

        seeded_sampling(fedavg, args.seed, counted)
        failed = watch_replies(strategy)
        start = time.perf_counter()
        strategy.start(grid=grid, initial_arrays=ArrayRecord(initial), num_rounds=args.rounds,
                       evaluate_fn=evaluate)
        out["failed"] = failed
        out.update(config=args.one, params=params, server_params=server_params,
                   description=DESCRIPTIONS[compression] + (
                       "" if server_opt == "fedavg" else f"; server {server_opt}: "
                       f"{SERVERS[server_opt][0]}({json.dumps(SERVERS[server_opt][1])[1:-1]})"),
                   server=server_opt,
                   downlink=None if params is None else args.downlink,
                   initial_on_clients=params is not None and args.initial_on_clients,
                   task=args.task, metric=task.metric, rowwise=rowwise,
                   rounds=rows(), curve=curve, dense_bytes=dense,
                   rejected=getattr(strategy, "rejected", []),
                   wall_s=time.perf_counter() - start)

    run_simulation(server_app=server, client_app=client, num_supernodes=task.num_clients,
                   backend_config={"client_resources": {"num_cpus": 1}})
    if "curve" not in out:
        sys.exit(f"{args.one}: the simulation ended before its last round (see the log above)")
    failed = out.pop("failed")
    if failed:  # figures of a run whose clients failed would be wrong
        sys.exit(f"{args.one}: {len(failed)} client replies were errors, the first in round "
                 f"{failed[0][0]}: {failed[0][1][:2000]}")
    print("RESULT " + json.dumps(out))


def parse_args(argv=None):
    """The parser and the parsed arguments, with --initial_on_clients
    resolved (its default: on with --downlink=per_node)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="fmnist", choices=sorted(TASKS),
                        help="fmnist: a CNN on Fashion-MNIST over --clients non-IID clients; "
                             "ncf: NeuMF on MovieLens-100K, one client per user (943)")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="comma-separated names of CONFIGS, each optionally with "
                             "@<server optimizer> (" + ", ".join(SERVERS) + "; fedavg when "
                             "omitted), or the aliases "
                             + ", ".join(f"{a} ({c})" for a, c in ALIASES.items()))
    parser.add_argument("--rounds", type=int, default=STANDARD_FLAGS["rounds"])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--per_round", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--lr_schedule", default="constant", choices=["constant", "cosine"],
                        help="the clients' learning rate over rounds: constant --lr, or a "
                             "half cosine from --lr down to --lr_min_ratio * --lr")
    parser.add_argument("--lr_min_ratio", type=float, default=0.1,
                        help="with --lr_schedule=cosine: the last round's share of --lr")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval_every", type=int, default=STANDARD_FLAGS["eval_every"])
    parser.add_argument("--downlink", default=STANDARD_FLAGS["downlink"],
                        choices=["versions", "per_node"],
                        help="versions: chains of the server's versions (dense at first "
                             "contact); per_node: one payload per message over what the "
                             "client holds")
    parser.add_argument("--initial_on_clients", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="with --downlink=per_node: clients rebuild the initial model "
                             "from the seed, so no message is dense [on with per_node]")
    parser.add_argument("--min_size", type=int, default=STANDARD_FLAGS["min_size"],
                        help="tensors under this many elements travel dense "
                             "[100: every weight tensor of the CNN; the library's: 1024]")
    parser.add_argument("--out", default="federated_bench.json")
    parser.add_argument("--plot", default=None,
                        help="the accuracy plot [--out with .png instead of its extension]")
    parser.add_argument("--summarize", metavar="JSON,JSON,...",
                        help="print the seeds table of these output files and exit")
    parser.add_argument("--at_round", type=int, metavar="R",
                        help="with --summarize: the figures as of round R of longer runs "
                             "(constant learning rate: what an R-round run measures)")
    parser.add_argument("--summary_plot", metavar="PNG",
                        help="with --summarize: also plot every configuration's run of the "
                             "lowest seed of those files (one line per configuration)")
    parser.add_argument("--frontier_plot", metavar="PNG",
                        help="with --summarize: also plot each compressed configuration's gap "
                             "to its uncompressed run (mean, worst and best seed) against its "
                             "volume, and print it as a table")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.initial_on_clients is None:  # the default: on wherever it applies
        args.initial_on_clients = args.downlink == "per_node"
    return parser, args


def main(argv=None):
    parser, args = parse_args(argv)
    if args.plot is None:  # beside the results, not in the working directory
        args.plot = os.path.splitext(args.out)[0] + ".png"
    if args.summarize:
        records, paths = [], args.summarize.split(",")
        for path in paths:
            try:
                with open(path) as f:
                    records.append(json.load(f))
            except (OSError, ValueError) as e:
                parser.error(f"cannot read {path} ({e}): --summarize takes the JSON files "
                             f"that runs of this bench wrote with --out")
        try:
            if args.at_round is not None:
                records = [as_of_round(rec, args.at_round, path)
                           for rec, path in zip(records, paths)]
            check_same_setup(records, paths)
        except ValueError as e:
            parser.error(str(e))
        print(seeds_table(records))
        if args.summary_plot:
            seed = min(rec["settings"]["seed"] for rec in records)
            runs = {}
            for rec in records:
                if rec["settings"]["seed"] == seed:
                    for r in rec["results"]:
                        runs.setdefault(r["config"], r)
            plot(list(runs.values()), args.summary_plot)
        if args.frontier_plot:
            points = frontier_points(records)
            print()
            print(frontier_table(points))
            frontier_plot(points, args.frontier_plot)
        return 0
    if args.at_round is not None or args.summary_plot or args.frontier_plot:
        parser.error("--at_round, --summary_plot and --frontier_plot go with --summarize")
    if args.initial_on_clients and args.downlink != "per_node":
        parser.error("--initial_on_clients needs --downlink=per_node")
    if not 0.0 <= args.lr_min_ratio <= 1.0:
        parser.error(f"--lr_min_ratio must be in [0, 1], got {args.lr_min_ratio}")
    if args.one:
        return run_one(args)
    names = [c for c in args.configs.split(",") if c]
    unknown = [c for c in names if not known(resolve(c))]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; valid: {', '.join(CONFIGS)}, "
                     f"each optionally with @ and a server optimizer of "
                     f"{', '.join(s for s in SERVERS if s != 'fedavg')} "
                     f"(golomb_qsgd@fedavgm), or the aliases {', '.join(ALIASES)}")
    if args.task == "ncf" and any(split_name(resolve(c))[1] != "fedavg" for c in names):
        parser.error("--task=ncf averages its embedding rows with RowwiseMean over FedAvg; "
                     "a server optimizer (@...) is not supported there: drop the suffix")
    data = data_source(args.task)
    if data == "synthetic":
        from deepreduce_bench.data import INSTALL_HINT
        print(f"WARNING: Fashion-MNIST is not installed ({INSTALL_HINT}): every configuration "
              "trains on SYNTHETIC data; the accuracies are NOT those of Fashion-MNIST",
              file=sys.stderr)
    results = []
    env = process_env(os.environ)
    for name in names:
        cmd = [sys.executable, os.path.abspath(__file__), f"--one={resolve(name)}"] + [
            a for a in (argv if argv is not None else sys.argv[1:])
            if not a.startswith(("--configs", "--one", "--out", "--plot"))]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            sys.exit(f"{name} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        results.append(json.loads(lines[-1][len("RESULT "):]))
        if name in ALIASES:
            results[-1]["alias"] = name
        print(f"{name}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    record = {"command": "benchmarks/federated_bench.py " + " ".join(sys.argv[1:]),
              "settings": dict({k: v for k, v in vars(args).items() if k != "one"},
                               local_training=LOCAL_TRAINING), "data": data,
              "aliases": {n: resolve(n) for n in names if n in ALIASES},
              "results": results}
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    plot(results, args.plot)
    print(table(results))
    for name, config in record["aliases"].items():
        print(f"{name}: {config}")
    if data == "synthetic":
        print("data: SYNTHETIC (Fashion-MNIST not installed): not Fashion-MNIST's accuracies")
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
