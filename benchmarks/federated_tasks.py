"""The tasks of benchmarks/federated_bench.py and how a client trains:
Fashion-MNIST split non-IID by a Dirichlet draw per class (dirichlet_split,
FashionMNIST) and MovieLens-100K with one client per user (MovieLensNCF), their
models, and the clients' local SGD (LocalSGD) at the learning rate of the round
(round_lr). The simulation's clients unpickle these by module name (Ray puts
the script's directory, benchmarks/, on its workers' path)."""
import math

import numpy as np


def round_lr(lr, schedule, rnd, rounds, min_ratio):
    """The clients' learning rate in round rnd (1-based) of `rounds`:
    'constant' lr; 'cosine' from lr in round 1 down to min_ratio * lr in the
    last round (half a cosine)."""
    if schedule == "constant":
        return lr
    progress = (rnd - 1) / max(rounds - 1, 1)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


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

