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
"""
import argparse
import json
import math
import os
import random
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
    "golomb_qsgd4_r15": {"compressor": "topk", "compress_ratio": 0.15, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 4},
    "golomb_qsgd3_r20": {"compressor": "topk", "compress_ratio": 0.2, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 3},
    "golomb_qsgd3_r18": {"compressor": "topk", "compress_ratio": 0.18, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 3},
    "golomb_qsgd2_r22": {"compressor": "topk", "compress_ratio": 0.22, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 2},
    # golomb_qsgd2_r22 (the previous recommendation)'s family at other volumes: 0.021,
    # 0.066 and 0.096 of FedAvg's volume on random updates of the CNN.
    "golomb_qsgd2_r7": {"compressor": "topk", "compress_ratio": 0.07, "deepreduce": "both",
                        "index": "golomb", "value": "qsgd", "bits": 2},
    "golomb_qsgd2_r35": {"compressor": "topk", "compress_ratio": 0.35, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 2},
    "golomb_qsgd2_r65": {"compressor": "topk", "compress_ratio": 0.65, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 2},
    # golomb_qsgd2_r22 with deterministic levels (nearest, not stochastic).
    "golomb_qsgd2n_r22": {"compressor": "topk", "compress_ratio": 0.22, "deepreduce": "both",
                          "index": "golomb", "value": "qsgd", "bits": 2,
                          "qsgd_rounding": "nearest"},
    # golomb_qsgd2_r22 with its positions chosen over the whole model (one
    # top-r over the fusion bucket) instead of per tensor; at 35 %, the
    # recommendation.
    "golomb_qsgd2_r22_bucket": {"compressor": "topk", "compress_ratio": 0.22,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    # Its family at other volumes (0.02, 0.07, 0.1 of FedAvg's: the frontier).
    "golomb_qsgd2_r7_bucket": {"compressor": "topk", "compress_ratio": 0.07,
                               "deepreduce": "both", "index": "golomb", "value": "qsgd",
                               "bits": 2, "topk_scope": "bucket"},
    "golomb_qsgd2_r35_bucket": {"compressor": "topk", "compress_ratio": 0.35,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    "golomb_qsgd2_r65_bucket": {"compressor": "topk", "compress_ratio": 0.65,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    # Between the 0.0475 and 0.065 of FedAvg's volume of r22 and r35 (bucket).
    "golomb_qsgd2_r28_bucket": {"compressor": "topk", "compress_ratio": 0.28,
                                "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                "bits": 2, "topk_scope": "bucket"},
    # Clients without residuals (memory none: FetchSGD's stateless clients),
    # at the recommendation's volume and at r22's (for the server of
    # SERVERS["topk22"], which keeps the error instead).
    "golomb_qsgd2_r35_bucket_noef": {"compressor": "topk", "compress_ratio": 0.35,
                                     "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                     "bits": 2, "topk_scope": "bucket", "memory": "none"},
    "golomb_qsgd2_r22_bucket_noef": {"compressor": "topk", "compress_ratio": 0.22,
                                     "deepreduce": "both", "index": "golomb", "value": "qsgd",
                                     "bits": 2, "topk_scope": "bucket", "memory": "none"},
    # golomb_qsgd2_r22 without the clients' residuals (memory none): each
    # message sends top-r of that round's update alone.
    "golomb_qsgd2_r22_noef": {"compressor": "topk", "compress_ratio": 0.22, "deepreduce": "both",
                              "index": "golomb", "value": "qsgd", "bits": 2, "memory": "none"},
    "golomb_qsgd1_r29": {"compressor": "topk", "compress_ratio": 0.29, "deepreduce": "both",
                         "index": "golomb", "value": "qsgd", "bits": 1},
    "golomb_stc_r40": {"compressor": "topk", "compress_ratio": 0.40, "deepreduce": "both",
                       "index": "golomb", "value": "ternary"},
    "golomb_qsgd3_d25_u12": {"compressor": "topk", "compress_ratio": 0.12, "deepreduce": "both",
                             "index": "golomb", "value": "qsgd", "bits": 3},
    "golomb_qsgd3_d12_u25": {"compressor": "topk", "compress_ratio": 0.25, "deepreduce": "both",
                             "index": "golomb", "value": "qsgd", "bits": 3},
}
# Names for the configurations the page's headline is about: `recommended` is
# the configuration docs/federated.md recommends, `baseline` its uncompressed
# counterpart (the same server optimizer, dense both ways). The runs record
# the real configuration (a result's "config", its "alias" beside it).
ALIASES = {
    "baseline": "fedavg",
    "recommended": "golomb_qsgd2_r28_bucket",
}
# Server optimizers: a configuration "<compression>@<server>" runs the
# compression of CONFIGS under the Flower strategy named here (FedAvg when no
# "@" is given). The uncompressed run of a server optimizer is
# "fedavg@<server>": the dense exchange, that server's update rule; it is the
# reference its compressed runs are compared with (never plain FedAvg).
SERVERS = {
    "fedavg": ("FedAvg", {}),
    # Hsu, Qi, Brown 2019: server momentum 0.9 (Flower's FedAvgM baseline:
    # server learning rate 1.0); and the same momentum at an effective
    # learning rate of 1 (lr / (1 - momentum)).
    "fedavgm": ("FedAvgM", {"server_momentum": 0.9, "server_learning_rate": 1.0}),
    "fedavgm_eff1": ("FedAvgM", {"server_momentum": 0.9, "server_learning_rate": 0.1}),
    # FetchSGD's server (Rothchild et al. 2020) without sketches: the model
    # moves by the top 22 % of the server's accumulated update
    # (deepreduce_tf.federated.FedAvgTopK): momentum 0.9 at a step of 0.1 (with
    # the momentum masked where the model moved, a tenth of FedAvg's step) and
    # of 1, and error accumulation alone (no momentum, step 1).
    "topk22": ("FedAvgTopK", {"density": 0.22, "server_momentum": 0.9,
                              "server_learning_rate": 0.1}),
    "topk22_m9_lr1": ("FedAvgTopK", {"density": 0.22, "server_momentum": 0.9,
                                     "server_learning_rate": 1.0}),
    "topk22_ef": ("FedAvgTopK", {"density": 0.22, "server_momentum": 0.0,
                                 "server_learning_rate": 1.0}),
    # Reddi et al. 2021 (adaptive federated optimization): server Adam.
    "fedadam": ("FedAdam", {"eta": 0.01, "eta_l": 0.05, "beta_1": 0.9, "beta_2": 0.99,
                            "tau": 1e-3}),
}
UNCOMPRESSED = "fedavg"  # CONFIGS' dense entry


def round_lr(lr, schedule, rnd, rounds, min_ratio):
    """The clients' learning rate in round rnd (1-based) of `rounds`:
    'constant' lr; 'cosine' from lr in round 1 down to min_ratio * lr in the
    last round (half a cosine)."""
    if schedule == "constant":
        return lr
    progress = (rnd - 1) / max(rounds - 1, 1)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def split_name(name):
    """A configuration's (compression, server) names: "golomb_qsgd@fedavgm"
    -> ("golomb_qsgd", "fedavgm"); without "@" the server is FedAvg."""
    compression, _, server = name.partition("@")
    return compression, server or "fedavg"


# Servers whose update is itself compressed (FedAvgTopK): their runs are
# compared with plain FedAvg, the uncompressed exchange.
SPARSE_SERVERS = {"topk22", "topk22_m9_lr1", "topk22_ef"}


def reference_of(name):
    """The uncompressed run a configuration is compared with: the dense
    exchange under the same server optimizer (plain FedAvg for a server of
    SPARSE_SERVERS)."""
    server = split_name(name)[1]
    if server == "fedavg" or server in SPARSE_SERVERS:
        return UNCOMPRESSED
    return f"{UNCOMPRESSED}@{server}"


def known(name):
    """Whether a (resolved) configuration name is one of CONFIGS under one
    of SERVERS."""
    compression, server = split_name(name)
    return compression in CONFIGS and server in SERVERS and name.count("@") <= 1 and (
        "@" not in name or server != "fedavg")


def make_strategy(server, **kwargs):
    """The Flower strategy of SERVERS[server] with the sampling kwargs."""
    from flwr.serverapp import strategy as strategies

    cls, extra = SERVERS[server]
    if cls == "FedAvgTopK":
        from deepreduce_tf.federated import FedAvgTopK

        return FedAvgTopK(**kwargs, **extra)
    return getattr(strategies, cls)(**kwargs, **extra)


# The page's standard flags, the defaults of main()'s parser.
STANDARD_FLAGS = {"rounds": 200, "eval_every": 10, "downlink": "per_node",
                  "initial_on_clients": True, "min_size": 100}


def resolve(name):
    """A configuration's name ("<CONFIGS entry>[@<SERVERS entry>]"): an
    alias's configuration, or the name itself."""
    return ALIASES.get(name, name)


# Configurations whose downlink (the server's) differs from the uplink; the
# others compress both directions alike.
SERVER_CONFIGS = {  # the uplink's dict with the downlink's own ratio
    "golomb_qsgd3_d25_u12": dict(CONFIGS["golomb_qsgd3_d25_u12"], compress_ratio=0.25),
    "golomb_qsgd3_d12_u25": dict(CONFIGS["golomb_qsgd3_d12_u25"], compress_ratio=0.12),
}
DESCRIPTIONS = {
    "fedavg": "FedAvg, dense both ways",
    "topk": "top-r 10 % + residual, raw int32 indices, fp32 values",
    "bloom_p0": "top-r 10 %, Bloom-P0 indices, fp32 values",
    "bloom_p0_polyfit": "top-r 10 %, Bloom-P0 indices, polyfit values",
    "qsgd_bloom_p0": "top-r 10 %, Bloom-P0 indices, QSGD 8-bit values",
    "golomb_qsgd": "top-r 10 %, golomb indices (lossless), QSGD 8-bit values",
    "golomb_qsgd4_r15": "top-r 15 %, golomb indices (lossless), QSGD 4-bit values",
    "golomb_qsgd3_r20": "top-r 20 %, golomb indices (lossless), QSGD 3-bit values",
    "golomb_qsgd3_r18": "top-r 18 %, golomb indices (lossless), QSGD 3-bit values",
    "golomb_qsgd2_r22": "top-r 22 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2_r7": "top-r 7 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2_r35": "top-r 35 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2_r65": "top-r 65 %, golomb indices (lossless), QSGD 2-bit values",
    "golomb_qsgd2n_r22": "top-r 22 %, golomb indices (lossless), QSGD 2-bit values rounded "
                         "to nearest",
    "golomb_qsgd2_r22_bucket": "top-r 22 % over the whole model (not per tensor), golomb "
                               "indices, QSGD 2-bit values",
    "golomb_qsgd2_r7_bucket": "top-r 7 % over the whole model, golomb indices, QSGD 2-bit "
                              "values",
    "golomb_qsgd2_r35_bucket": "top-r 35 % over the whole model, golomb indices, QSGD 2-bit "
                               "values",
    "golomb_qsgd2_r65_bucket": "top-r 65 % over the whole model, golomb indices, QSGD 2-bit "
                               "values",
    "golomb_qsgd2_r28_bucket": "top-r 28 % over the whole model, golomb indices, QSGD 2-bit "
                               "values",
    "golomb_qsgd2_r35_bucket_noef": "top-r 35 % over the whole model, golomb indices, QSGD "
                                    "2-bit values; no client residual",
    "golomb_qsgd2_r22_bucket_noef": "top-r 22 % over the whole model, golomb indices, QSGD "
                                    "2-bit values; no client residual",
    "golomb_qsgd2_r22_noef": "top-r 22 %, golomb indices, QSGD 2-bit values; no client "
                             "residual",
    "golomb_qsgd1_r29": "top-r 29 %, golomb indices (lossless), QSGD 1-bit values (ternary)",
    "golomb_stc_r40": "top-r 40 %, golomb indices (lossless), sparse ternary values (STC)",
    "golomb_qsgd3_d25_u12": "golomb indices, QSGD 3-bit values; top-r 25 % down, 12 % up",
    "golomb_qsgd3_d12_u25": "golomb indices, QSGD 3-bit values; top-r 12 % down, 25 % up",
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


class FashionMNIST:
    """The small CNN on Fashion-MNIST split by Dirichlet(alpha) over --clients."""

    metric = "accuracy"

    def __init__(self, args):
        self.args = args
        self.num_clients = args.clients
        self.train = self.parts = None

    def build_model(self):
        return build_model()

    def compile(self, model):
        return compile_model(model, self.args.lr)

    def client_data(self, pid):
        from deepreduce_bench.data import load_fashion_mnist

        if self.train is None:
            self.train = load_fashion_mnist("train", stream=None)
            self.parts = dirichlet_split(self.train.labels, self.num_clients, self.args.alpha,
                                         self.args.seed)
        idx = self.parts[pid]
        return (self.train.images[idx, :, :, None].astype(np.float32) / 255.0,
                self.train.labels[idx].astype(np.int64))

    def rowwise_keys(self, model):
        return []

    def evaluator(self):
        from deepreduce_bench.data import load_fashion_mnist

        test = load_fashion_mnist("test", stream=None)
        tx = test.images[:, :, :, None].astype(np.float32) / 255.0
        ty = test.labels.astype(np.int64)
        return lambda model: float(model.evaluate(tx, ty, batch_size=1000, verbose=0)[1])


class MovieLensNCF:
    """NeuMF on MovieLens-100K, one client per user (943): a client's data is
    its user's training interactions with 4 sampled negatives each (the NCF
    leave-one-out split, deepreduce_bench.movielens); the server evaluates HR@10
    of every user's held-out item among 100 candidates. The embedding tables
    are averaged row-wise (RowwiseMean): a user's row changes only at its
    own client."""

    metric = "hit_rate"

    def __init__(self, args):
        from deepreduce_bench import movielens

        self.args = args
        self.data = movielens.load_ncf(seed=args.seed, allow_synthetic=False, stream=None)
        self.num_clients = int(self.data.num_users)
        users = self.data.train[0]
        order = np.argsort(users, kind="stable")
        cuts = np.searchsorted(users[order], np.arange(self.num_clients + 1))
        self.rows = [order[cuts[u]:cuts[u + 1]] for u in range(self.num_clients)]

    def build_model(self):
        from deepreduce_bench import models

        return models.neumf(self.data.num_users, self.data.num_items)

    def compile(self, model):
        import keras

        model.compile(optimizer=keras.optimizers.Adam(self.args.lr),
                      loss=keras.losses.BinaryCrossentropy(from_logits=True))
        return model

    def client_data(self, pid):
        users, items, labels = self.data.train
        idx = self.rows[pid]
        return (users[idx], items[idx]), labels[idx].astype(np.float32)

    def rowwise_keys(self, model):
        return [str(i) for i, w in enumerate(model.weights) if "embedding" in w.path]

    def evaluator(self):
        from deepreduce_bench import movielens

        return lambda model: float(movielens.evaluate(model, self.data, k=10)[0])


TASKS = {"fmnist": FashionMNIST, "ncf": MovieLensNCF}


class LocalSGD:
    """A client's local training: `epochs` passes over its data in shuffled
    minibatches, one optimizer step each (what `model.fit(shuffle=True)`
    does), with one compiled step per batch shape. Keras' `fit` builds a
    tf.data pipeline and an iterator on every call: 40 FedAvg rounds took
    113 s with it and 82 s with this, side by side on 2 cores."""

    def __init__(self, model):
        import tensorflow as tf

        self.model = model

        @tf.function(reduce_retracing=True)
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True),
                                          training=True)
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables))

        self.step = step

    def __call__(self, x, y, batch_size, epochs, seed):
        # Not keras.utils.set_random_seed: it resets TensorFlow's global seed,
        # which clears the process's cached kernels and functions, and the
        # next client's every op paid ~0.1 s to rebuild them. The models here
        # have no random layers; the shuffle is numpy's.
        rng = np.random.default_rng(seed)
        for _ in range(epochs):
            order = rng.permutation(len(y))
            for start in range(0, len(y), batch_size):
                idx = order[start:start + batch_size]
                self.step(tuple(a[idx] for a in x) if isinstance(x, tuple) else x[idx], y[idx])


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


LAST = 3  # evaluations averaged in the seeds table (one evaluation is noisy)


def figures(r):
    """One run's bytes per direction relative to FedAvg's for the same
    messages, a version's payload relative to the dense model (None: no
    versions), and the final test metric."""
    rounds = r["rounds"]
    down = sum(x["down_bytes"] for x in rounds)
    up = sum(x["up_bytes"] for x in rounds)
    fed_down = r["dense_bytes"] * sum(x["down_messages"] for x in rounds)
    fed_up = r["dense_bytes"] * sum(x["up_messages"] for x in rounds)
    versions = sum(x.get("versions", 0) for x in rounds)
    version = (sum(x.get("version_bytes", 0) for x in rounds) / (versions * r["dense_bytes"])
               if versions else (1.0 if split_name(r["config"])[0] == UNCOMPRESSED else None))
    metric = r.get("metric", "accuracy")
    last = [c[metric] for c in r["curve"][-LAST:]]
    return {"down_round": down / len(rounds), "up_round": up / len(rounds),
            "down": down / fed_down, "up": up / fed_up, "version": version,
            "total": (down + up) / (fed_down + fed_up),
            "final": last[-1] if last else math.nan,
            "last": float(np.mean(last)) if last else math.nan}


def _metric_name(results):
    return "HR@10" if results and results[0].get("metric") == "hit_rate" else "test acc."


def table(results):
    bases = {r["config"]: r for r in results if r["config"] == reference_of(r["config"])}
    lines = [f"{'configuration':<18} | {'down B/round':>12} | {'up B/round':>11} | "
             f"{'down vs FedAvg':>14} | {'version':>7} | {'up vs FedAvg':>12} | "
             f"{'total':>6} | {_metric_name(results):>9} | {'vs FedAvg':>9}"]
    for r in results:
        f = figures(r)
        version = "-" if f["version"] is None else f"{f['version']:.4f}"
        base = bases.get(reference_of(r["config"]))
        delta = (f"{100 * (f['final'] - figures(base)['final']):+.2f} pts"
                 if base and base["curve"] else "-")
        lines.append(f"{r['config']:<18} | {f['down_round']:>12,.0f} | "
                     f"{f['up_round']:>11,.0f} | {f['down']:>14.4f} | "
                     f"{version:>7} | {f['up']:>12.4f} | {f['total']:>6.4f} | "
                     f"{f['final']:>9.4f} | {delta:>9}")
    return "\n".join(lines)


# The settings that make runs comparable: --summarize refuses records that
# differ in any of them (the seed is what differs between them).
SETUP_KEYS = ("task", "rounds", "clients", "per_round", "alpha", "epochs", "batch_size", "lr",
              "lr_schedule", "lr_min_ratio", "eval_every", "downlink", "initial_on_clients",
              "min_size", "local_training")
# How clients train: `LocalSGD` since 2026-11-29; records without the key
# trained with Keras' `fit`, which shuffles with TensorFlow's generator, so
# the same seed trains on other minibatches: pair such records only with
# each other.
LOCAL_TRAINING = "local_sgd"


def setup_of(settings):
    """The settings of SETUP_KEYS of a record. Records written before the
    learning-rate schedule existed ran the constant one; the last round's share
    matters only with the cosine schedule."""
    setup = {k: settings.get(k) for k in SETUP_KEYS}
    setup["lr_schedule"] = setup["lr_schedule"] or "constant"
    setup["local_training"] = setup["local_training"] or "keras_fit"
    if setup["lr_schedule"] == "constant":
        setup["lr_min_ratio"] = None
    return setup


def as_of_round(record, upto, path):
    """The record of a longer run read as the `upto`-round run it contains:
    its rounds and evaluations up to round `upto`. With the constant learning
    rate nothing in rounds 1..upto depends on the number of rounds (sampling,
    local seeds and the server's updates are per round), so these are the
    figures an `upto`-round run measures; a cosine schedule decays over the
    whole run, and its runs are refused. Raises ValueError, naming the file."""
    settings = record["settings"]
    rounds = settings["rounds"]
    if not 1 <= upto <= rounds:
        raise ValueError(f"{path} ran {rounds} rounds: --at_round must be in [1, {rounds}], "
                         f"got {upto}")
    if upto < rounds and setup_of(settings)["lr_schedule"] != "constant":
        raise ValueError(f"{path} ran the {settings['lr_schedule']} schedule, which decays over "
                         f"all {rounds} rounds: its round {upto} is not an {upto}-round run")
    results = []
    for r in record["results"]:
        curve = [c for c in r["curve"] if c["round"] <= upto]
        if not curve or curve[-1]["round"] != upto:
            raise ValueError(f"{path}: {r['config']} has no evaluation at round {upto} "
                             f"(evaluated every {settings.get('eval_every')} rounds)")
        results.append(dict(r, curve=curve, rounds=[x for x in r["rounds"] if x["round"] <= upto]))
    return dict(record, settings=dict(settings, rounds=upto), results=results)


def check_same_setup(records, paths):
    """Raises ValueError naming the first setting in which two records
    differ, or a configuration run twice on one seed: a seeds table pairs
    runs of one setup only, one run per configuration and seed."""
    seen = {}
    for rec, path in zip(records, paths):
        for r in rec["results"]:
            key = (r["config"], rec["settings"]["seed"])
            if key in seen:
                raise ValueError(f"{r['config']} ran on seed {key[1]} in both {seen[key]} and "
                                 f"{path}: summarize one run per configuration and seed")
            seen[key] = path
    first = setup_of(records[0]["settings"])
    for rec, path in zip(records[1:], paths[1:]):
        setup = setup_of(rec["settings"])
        for key in SETUP_KEYS:
            if setup[key] != first[key]:
                def said(value):
                    return (f"local training {value}" if key == "local_training"
                            else f"--{key}={value}")

                raise ValueError(
                    f"{path} ran with {said(setup[key])}, {paths[0]} with {said(first[key])}: "
                    f"a seeds table compares runs of one setup; summarize them separately")


def seed_summaries(records):
    """records: the JSON records of runs of the same settings with different
    seeds. Per configuration, in order of appearance, a dict: its label
    (with the aliases it ran under: "golomb_qsgd2_r35_bucket (recommended)"), its
    reference (reference_of), its seeds, the bytes relative to the dense
    model per direction (`ratio`: mean over seeds; the same for every server
    optimizer), the final metric per seed, and `paired`: for "final" and
    "last" (the mean of the last LAST evaluations), {seed: the difference to
    the reference's run of the same seed (same sampled clients), in points}
    (empty for the reference itself)."""
    runs, aliases = {}, {}
    for rec in records:
        seed = rec["settings"]["seed"]
        for r in rec["results"]:
            runs.setdefault(r["config"], {})[seed] = figures(r)
            if r.get("alias"):
                aliases.setdefault(r["config"], set()).add(r["alias"])
    out = []
    for config, by_seed in runs.items():
        reference = reference_of(config)
        base = runs.get(reference, {}) if config != reference else {}
        seeds = sorted(by_seed)
        out.append({
            "config": config, "reference": reference,
            "label": config + (f" ({', '.join(sorted(aliases[config]))})"
                               if config in aliases else ""),
            "seeds": seeds, "finals": [by_seed[s]["final"] for s in seeds],
            "ratio": {k: float(np.mean([by_seed[s][k] for s in seeds]))
                      for k in ("down", "up", "total")},
            "paired": {key: {s: 100 * (by_seed[s][key] - base[s][key])
                             for s in seeds if s in base} for key in ("final", "last")}})
    return out


def _mean_sd(values):
    values = np.asarray(values, np.float64)
    sd = values.std(ddof=1) if len(values) > 1 else math.nan
    return values.mean(), sd


def seeds_table(records):
    """The seeds table of seed_summaries(records): per configuration its
    seeds, the bytes relative to FedAvg per direction, the final metric per
    seed and its mean ± sd (ddof 1), the difference to the reference of the
    same seed in points, mean ± sd, of the final metric and of the mean of
    the last LAST evaluations, and the worst seed of the latter."""
    rows = seed_summaries(records)
    name = _metric_name([r for rec in records for r in rec["results"]])
    lines = [f"| configuration | seeds | down vs FedAvg | up vs FedAvg | total | {name} per seed "
             f"| mean ± sd | vs uncompressed (same seed), pts "
             f"| last {LAST} evaluations vs uncompressed, pts | worst seed, last {LAST}, pts |",
             "|---|--:|--:|--:|--:|---|--:|--:|--:|--:|"]
    for row in rows:
        m, sd = _mean_sd(row["finals"])
        vs = []
        for key in ("final", "last"):
            paired = list(row["paired"][key].values())
            if not paired:
                vs.append("–")
            else:
                pm, psd = _mean_sd(paired)
                vs.append(f"{pm:+.2f}" + ("" if math.isnan(psd) else f" ± {psd:.2f}"))
        last = row["paired"]["last"]
        worst = min(last, key=lambda s: (last[s], s)) if last else None
        ratio = row["ratio"]
        lines.append(f"| {row['label']} | {len(row['seeds'])} | {ratio['down']:.4f} | "
                     f"{ratio['up']:.4f} | {ratio['total']:.4f} | "
                     f"{', '.join(f'{v:.4f}' for v in row['finals'])} | "
                     f"{m:.4f}" + ("" if math.isnan(sd) else f" ± {sd:.4f}")
                     + f" | {vs[0]} | {vs[1]} | "
                     + ("–" if worst is None else f"{last[worst]:+.2f} (seed {worst})") + " |")
    return "\n".join(lines)


def frontier_points(records):
    """The volume/accuracy frontier of seed_summaries(records): per
    compressed configuration with a paired reference, (label, total volume
    relative to FedAvg, mean, worst and best over seeds of the difference
    to the reference over the last LAST evaluations in points, the seeds,
    each seed's difference), by volume."""
    points = []
    for row in seed_summaries(records):
        last = row["paired"]["last"]
        if last:
            seeds = sorted(last)
            gaps = [last[s] for s in seeds]
            points.append((row["label"], row["ratio"]["total"], float(np.mean(gaps)),
                           min(gaps), max(gaps), seeds, gaps))
    return sorted(points, key=lambda p: p[1])


def frontier_table(points, goal=-0.5):
    """The table of frontier_points: per configuration, by volume, the mean,
    the worst and the best seed of the difference over the last LAST
    evaluations, the spread between them, and how many seeds meet the goal
    (no more than -goal points below the reference)."""
    lines = [f"| configuration | total vs FedAvg | seeds | mean, last {LAST}, pts "
             f"| worst seed, pts | best seed, pts | spread, pts | seeds within {-goal:g} |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for label, volume, mean, worst, best, seeds, gaps in points:
        worst_seed = min(zip(gaps, seeds))[1]
        best_seed = max(zip(gaps, seeds))[1]
        within = sum(g >= goal for g in gaps)
        lines.append(f"| {label} | {volume:.4f} | {', '.join(map(str, seeds))} | {mean:+.2f} | "
                     f"{worst:+.2f} (seed {worst_seed}) | {best:+.2f} (seed {best_seed}) | "
                     f"{best - worst:.2f} | {within} of {len(seeds)} |")
    return "\n".join(lines)


def frontier_plot(points, path, goal=-0.5):
    """Draws frontier_points: the mean gap per configuration against its
    volume (log scale), a bar from the worst seed to the best, each seed a
    dot, and the goal as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, volume, mean, worst, best, seeds, gaps in points:
        bar = ax.errorbar([volume], [mean], yerr=[[mean - worst], [best - mean]], fmt="o",
                          capsize=4, label=f"{label}: {mean:+.2f} (worst {worst:+.2f}, "
                                           f"{len(seeds)} seeds)")
        ax.plot([volume] * len(gaps), gaps, "_", ms=10, color=bar[0].get_color(), alpha=0.6)
    ax.axhline(goal, color="grey", linestyle="--", linewidth=1)
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, goal - 0.25), max(high, 0.25))  # the goal and zero in view
    ax.set_xscale("log")
    volumes = [p[1] for p in points] or [0.05]
    ax.set_xlim(min(volumes) / 1.4, max(volumes) * 1.4)
    ticks = [t for t in (0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.5, 1.0)
             if min(volumes) / 1.4 <= t <= max(volumes) * 1.4]
    ax.xaxis.set_major_locator(FixedLocator(ticks or [volumes[0]]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{t:g}" for t in ticks or [volumes[0]]])
    ax.set_xlabel("volume, both directions, relative to FedAvg (log scale)")
    ax.set_ylabel(f"last {LAST} evaluations vs uncompressed, points")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        points = [c for c in r["curve"] if c["bytes"] > 0]  # round 0: nothing sent yet
        ax.plot([c["bytes"] / 2 ** 20 for c in points],
                [c[r.get("metric", "accuracy")] for c in points],
                marker="o", ms=3, label=r["config"])
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent, both directions, cumulative (MiB, log scale)")
    ax.set_ylabel("test HR@10 (MovieLens-100K, 943 users)"
                  if results[0].get("metric") == "hit_rate"
                  else "test accuracy (Fashion-MNIST, 10,000 images)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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
