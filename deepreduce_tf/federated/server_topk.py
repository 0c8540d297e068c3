"""FedAvgTopK: FedAvg whose model moves by the top-k of the server's
accumulated update (FetchSGD's server, Rothchild et al. 2020, without the
sketches).

Each round the server averages the clients' models as FedAvg does and takes
the pseudo-gradient g = x - mean (x: the model the round started from). It
keeps a momentum m and an error accumulator e, each one model's size:

    m <- rho * m + g
    e <- e + lr * m
    delta <- the k entries of e largest in magnitude (k = density * model size,
             one selection over the whole model), zero elsewhere
    e, m <- 0 where delta is not zero          (FetchSGD's momentum masking)
    x <- x - delta

so the model changes in at most k places per round, and what was not applied
waits in e. Under DeepReduceStrategy's per-node downlink a node that trained
last round is sent about `delta` (sparse), while the clients may keep no
residual at all (params memory 'none': stateless clients, FetchSGD's setting):
the server's e is then the only error feedback.

Server state: two model-sized float32 arrays (m and e), saved and restored
with the rest of the server's state by DeepReduceStrategy.save_state /
load_state (server_state() / load_server_state(), the hooks
federated/server_state.py calls), so a restarted server goes on with the m
and e it had.
"""
from logging import INFO

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.common.logger import log
from flwr.serverapp.strategy import FedAvg


class FedAvgTopK(FedAvg):
    """FedAvg with a sparse server update (module docstring).

    Args:
      density: the fraction of the model's entries the model changes in per
        round, in (0, 1] (k = max(1, round(density * size))).
      server_momentum: rho in [0, 1) [0.9].
      server_learning_rate: lr > 0 [1.0: the clients' update at its own scale;
        the momentum is zeroed where the model moved, so an entry applied every
        round moves by lr * g, as in FedAvg at lr 1].
      **kwargs: FedAvg's (fraction_train, min_train_nodes, ...).
    """

    def __init__(self, density, server_momentum=0.9, server_learning_rate=1.0, **kwargs):
        for name, value in (("density", density), ("server_momentum", server_momentum),
                            ("server_learning_rate", server_learning_rate)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not np.isfinite(value):
                raise ValueError(f"FedAvgTopK: {name} must be a finite number, got {value!r}")
        if not 0 < density <= 1:
            raise ValueError(f"FedAvgTopK: density must be in (0, 1], got {density!r}")
        if not 0 <= server_momentum < 1:
            raise ValueError("FedAvgTopK: server_momentum must be in [0, 1), got "
                             f"{server_momentum!r}")
        if server_learning_rate <= 0:
            raise ValueError("FedAvgTopK: server_learning_rate must be > 0, got "
                             f"{server_learning_rate!r}")
        super().__init__(**kwargs)
        self.density = float(density)
        self.server_momentum = float(server_momentum)
        self.server_learning_rate = float(server_learning_rate)
        self.current_arrays = None  # the model this round started from
        self.momentum = None        # m, flat float32
        self.error = None           # e, flat float32

    def summary(self):
        log(INFO, "\t├──> FedAvgTopK settings:")
        log(INFO, "\t│\t├── density: %s of the model's entries per round", self.density)
        log(INFO, "\t│\t├── server momentum: %s", self.server_momentum)
        log(INFO, "\t│\t└── server learning rate: %s", self.server_learning_rate)
        super().summary()

    def configure_train(self, server_round, arrays, config, grid):
        self.current_arrays = arrays
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        mean, metrics = super().aggregate_train(server_round, replies)
        if mean is None:
            return mean, metrics
        if self.current_arrays is None:
            raise RuntimeError("FedAvgTopK: aggregate_train before configure_train (the round's "
                               "model is not known)")
        keys = list(self.current_arrays.keys())
        if list(mean.keys()) != keys:
            raise ValueError(f"FedAvgTopK: the clients' arrays {list(mean.keys())} are not the "
                             f"model's {keys}")
        x = self.current_arrays.to_numpy_ndarrays()
        avg = mean.to_numpy_ndarrays()
        flat_x = np.concatenate([a.ravel().astype(np.float32) for a in x])
        grad = flat_x - np.concatenate([a.ravel().astype(np.float32) for a in avg])
        if self.momentum is None or self.momentum.size != grad.size:
            self.momentum = np.zeros_like(grad)
            self.error = np.zeros_like(grad)
        self.momentum *= self.server_momentum
        self.momentum += grad
        self.error += self.server_learning_rate * self.momentum
        k = max(1, int(round(self.density * grad.size)))
        if k < grad.size:
            picked = np.argpartition(np.abs(self.error), grad.size - k)[grad.size - k:]
        else:
            picked = np.arange(grad.size)
        new = flat_x.copy()
        new[picked] -= self.error[picked]
        self.error[picked] = 0.0
        self.momentum[picked] = 0.0
        out, start = {}, 0
        for key, old in zip(keys, x):
            part = new[start:start + old.size].reshape(old.shape).astype(old.dtype, copy=False)
            out[key] = Array(np.ascontiguousarray(part))
            start += old.size
        self.current_arrays = ArrayRecord(out)
        return self.current_arrays, metrics

    # ------------------------------------------------- persistence (server_state.py)
    def _settings(self):
        return {"density": self.density, "server_momentum": self.server_momentum,
                "server_learning_rate": self.server_learning_rate}

    def server_state(self):
        """(settings, arrays): what DeepReduceStrategy.save_state saves of
        this strategy. settings: the rule's parameters, which m and e are
        only valid under; arrays: 'momentum' and 'error' (flat float32, the
        model's size), none before the first aggregation."""
        arrays = {} if self.momentum is None else {"momentum": self.momentum.copy(),
                                                   "error": self.error.copy()}
        return self._settings(), arrays

    def load_server_state(self, settings, arrays, model):
        """Restores server_state()'s (settings, arrays) into this strategy,
        built with the same settings, for `model` (the model's numpy arrays).
        Raises ValueError saying what differs; the strategy is unchanged
        then."""
        mine = self._settings()
        if not isinstance(settings, dict):
            raise ValueError(f"FedAvgTopK: the saved settings are not a dict: {settings!r}")
        for key, value in mine.items():
            if settings.get(key) != value:
                raise ValueError(f"FedAvgTopK: the state was saved with {key}="
                                 f"{settings.get(key)!r}, this strategy has {key}={value!r}: "
                                 "build it as the one that saved it")
        if set(arrays) - {"momentum", "error"} or len(arrays) == 1:
            raise ValueError("FedAvgTopK: the saved state must hold 'momentum' and 'error' "
                             f"(or neither, before the first round), got {sorted(arrays)}")
        size = sum(int(np.asarray(a).size) for a in model)
        for name, a in arrays.items():
            if a.dtype != np.float32 or a.shape != (size,):
                raise ValueError(f"FedAvgTopK: the saved {name} is {a.dtype} {a.shape}, the "
                                 f"model needs float32 ({size},)")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"FedAvgTopK: the saved {name} holds NaN/Inf")
        if arrays:
            self.momentum = np.array(arrays["momentum"], np.float32)
            self.error = np.array(arrays["error"], np.float32)
        else:
            self.momentum = self.error = None
