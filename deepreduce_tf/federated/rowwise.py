"""RowwiseMean: a mean-type Flower strategy whose embedding-table rows are
averaged over the clients that changed them (docs/federated.md,
"Embedding tables")."""
import logging

import numpy as np
from flwr.app import Array
from flwr.serverapp.strategy import Strategy

logger = logging.getLogger("deepreduce_tf.federated")


class RowwiseMean(Strategy):
    """Wraps a mean-type Flower strategy (FedAvg, FedProx: a weighted mean of
    the clients' models) so that every row of the named tables, such as
    embedding tables, is averaged over the clients that changed it, not over
    all of the round's clients.

    A client of a recommender changes only its own user's row and the rows of
    the items it saw: FedAvg would shrink each of those changes by the
    number of clients in the round that did not touch the row. Before the wrapped strategy averages, each client's change
    of row r, Delta_i[r] = w_i[r] - x[r], is scaled by W / W_r (W: the sum
    of the round's weights, W_r: that of the clients whose change of row r is
    non-zero), so the weighted mean gives row r the weighted mean over the
    clients that changed it; other arrays are averaged as before. Compose
    with compression as DeepReduceStrategy(RowwiseMean(FedAvg(...), keys),
    params): it then sees the decoded updates.

    Args:
      strategy: the wrapped flwr.serverapp.strategy.Strategy; its mean must
        be weighted by the reply metric `weighted_by_key` (FedAvg's
        'num-examples'), or be unweighted.
      keys: the ArrayRecord keys of the tables (arrays of rank >= 2; a row
        is a slice along the first axis).
    """

    def __init__(self, strategy, keys):
        if not isinstance(strategy, Strategy):
            raise TypeError("RowwiseMean wraps a flwr.serverapp.strategy.Strategy, got "
                            f"{type(strategy).__name__}")
        self.strategy = strategy
        self.keys = [str(k) for k in keys]
        if not self.keys:
            raise ValueError("RowwiseMean needs the keys of at least one table")
        self.arrays_key = getattr(strategy, "arrayrecord_key", "arrays")
        self.weighted_by_key = getattr(strategy, "weighted_by_key", None)
        self._sent = None  # the model of the last configure_train

    def configure_train(self, server_round, arrays, config, grid):
        missing = [k for k in self.keys if k not in arrays]
        if missing:
            raise ValueError(f"RowwiseMean: the model has no arrays {missing}; its keys are "
                             f"{list(arrays.keys())}")
        for k in self.keys:
            if arrays[k].numpy().ndim < 2:
                raise ValueError(f"RowwiseMean: array {k!r} has shape {arrays[k].shape}, not "
                                 "a table (rank >= 2)")
        self._sent = {k: arrays[k].numpy() for k in self.keys}
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def _usable(self, msg):
        """(weight, record) of a train reply, or the reason it cannot be
        averaged row-wise."""
        record = msg.content.array_records.get(self.arrays_key)
        if record is None:
            return f"the reply has no ArrayRecord {self.arrays_key!r}"
        weight = 1.0
        if self.weighted_by_key is not None:
            metrics = msg.content.metric_records.get("metrics")
            value = None if metrics is None else metrics.get(self.weighted_by_key)
            if not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
                return f"its metric {self.weighted_by_key!r} is {value!r}, not a positive number"
            weight = float(value)
        for k in self.keys:
            x = self._sent[k]
            if k not in record:
                return f"it has no array {k!r}"
            if tuple(record[k].shape) != x.shape or record[k].dtype != str(x.dtype):
                return (f"its array {k!r} is {record[k].dtype} {tuple(record[k].shape)}, the "
                        f"model's {x.dtype} {x.shape}")
        return weight, record

    def aggregate_train(self, server_round, replies):
        kept, usable = [], []
        for msg in replies:
            if not msg.has_error() and self._sent is not None:
                got = self._usable(msg)
                if isinstance(got, str):
                    logger.warning("round %s: left out the update of node %s: %s", server_round,
                                   msg.metadata.src_node_id, got)
                    continue
                usable.append(got)
            kept.append(msg)
        if usable:
            total = sum(w for w, _ in usable)
            for k in self.keys:
                x = self._sent[k]
                deltas = [record[k].numpy() - x for _, record in usable]
                touched = [np.any(d.reshape(d.shape[0], -1) != 0, axis=1) for d in deltas]
                row_weight = sum(w * t for (w, _), t in zip(usable, touched))
                scale = np.where(row_weight > 0, total / np.maximum(row_weight, 1e-300), 0.0)
                scale = scale.reshape((-1,) + (1,) * (x.ndim - 1))
                for (_, record), d in zip(usable, deltas):
                    record[k] = Array((x + (d * scale).astype(x.dtype)).astype(x.dtype))
        return self.strategy.aggregate_train(server_round, kept)

    def configure_evaluate(self, server_round, arrays, config, grid):
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round, replies):
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self):
        self.strategy.summary()
        logger.info("RowwiseMean over the rows of %s", self.keys)
