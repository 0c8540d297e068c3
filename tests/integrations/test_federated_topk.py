"""FedAvgTopK (deepreduce_tf/federated/server_topk.py): the server's sparse
update with momentum and error accumulation, against a numpy reference of
FetchSGD's server rule, alone and inside DeepReduceStrategy; its momentum
and error saved and restored with DeepReduceStrategy's server state."""
import json
import random

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402,E501

from deepreduce_tf.federated import DeepReduceStrategy, FedAvgTopK, deepreduce_mod  # noqa: E402

SHAPES = [(3, 3, 1, 8), (8,), (50, 12), (12,)]
NODES = [1, 2, 3]


@pytest.fixture
def task_identity(monkeypatch):
    """Messages need the identity Flower's runtime sets in its processes."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


class Grid:
    def get_node_ids(self):
        return list(NODES)


def model(seed, scale):
    rng = np.random.default_rng(seed)
    return [(scale * rng.normal(size=s)).astype(np.float32) for s in SHAPES]


def local(received, node, rnd):
    """A client: a step toward a target of its own that moves each round."""
    return [w + 0.5 * (t - w) for w, t in zip(received, model(100 * rnd + node, 0.5))]


def weight(node):
    return 10 + node


def reference(x0, rounds, density, rho, lr):
    """FetchSGD's server rule in float64, written out: the models after each
    round, and the entries changed in each."""
    x = np.concatenate([a.ravel() for a in x0]).astype(np.float64)
    m, e = np.zeros_like(x), np.zeros_like(x)
    k = max(1, int(round(density * x.size)))
    models, changed = [], []
    for rnd in range(1, rounds + 1):
        sizes = np.cumsum([0] + [int(np.prod(s)) for s in SHAPES])
        held = [x[a:b].reshape(s).astype(np.float32) for a, b, s in zip(sizes, sizes[1:], SHAPES)]
        mean = sum(weight(n) * np.concatenate([a.ravel() for a in local(held, n, rnd)])
                   .astype(np.float64) for n in NODES) / sum(weight(n) for n in NODES)
        m = rho * m + (x - mean)
        e = e + lr * m
        top = np.argsort(-np.abs(e), kind="stable")[:k]
        x = x.copy()
        x[top] -= e[top]
        e[top] = 0
        m[top] = 0
        models.append(x.copy())
        changed.append(set(top.tolist()))
    return models, changed


def reply(msg, node, rnd, arrays):
    return Message(RecordDict({"arrays": ArrayRecord(local(arrays, node, rnd)),
                               "metrics": MetricRecord({"num-examples": weight(node)})}),
                   reply_to=msg)


def flat(record):
    return np.concatenate([a.ravel() for a in record.to_numpy_ndarrays()])


def sampling():
    return dict(fraction_train=1.0, min_train_nodes=3, min_available_nodes=3,
                fraction_evaluate=0.0)


@pytest.mark.parametrize("rho,lr", [(0.9, 0.1), (0.0, 1.0)])
def test_the_model_moves_by_the_top_k_of_the_accumulated_update(task_identity, rho, lr):
    density = 0.05
    strategy = FedAvgTopK(density, server_momentum=rho, server_learning_rate=lr, **sampling())
    x0 = model(0, 0.1)
    want, changed = reference(x0, 4, density, rho, lr)
    current = ArrayRecord(x0)
    k = round(density * sum(int(np.prod(s)) for s in SHAPES))
    for rnd in range(1, 5):
        messages = list(strategy.configure_train(rnd, current, ConfigRecord(), Grid()))
        replies = [reply(msg, msg.metadata.dst_node_id, rnd,
                         msg.content["arrays"].to_numpy_ndarrays()) for msg in messages]
        before = flat(current)
        current, _ = strategy.aggregate_train(rnd, replies)
        after = flat(current)
        moved = set(np.flatnonzero(after != before).tolist())
        assert moved <= changed[rnd - 1] and len(changed[rnd - 1]) == k
        np.testing.assert_allclose(after, want[rnd - 1], rtol=1e-5, atol=1e-6)
        assert [a.dtype for a in current.to_numpy_ndarrays()] == [np.float32] * len(SHAPES)
    # What was not applied waits on the server: its error is not zero, and it
    # is zero where the last round changed the model.
    assert np.abs(strategy.error).sum() > 0
    assert not strategy.error[sorted(changed[-1])].any()


def test_whole_density_no_momentum_step_one_is_fedavg(task_identity):
    strategy = FedAvgTopK(1.0, server_momentum=0.0, server_learning_rate=1.0, **sampling())
    x0 = model(0, 0.1)
    messages = list(strategy.configure_train(1, ArrayRecord(x0), ConfigRecord(), Grid()))
    got, _ = strategy.aggregate_train(1, [reply(m, m.metadata.dst_node_id, 1, x0)
                                          for m in messages])
    mean = [sum(weight(n) * loc[i] for n, loc in ((n, local(x0, n, 1)) for n in NODES)) /
            sum(weight(n) for n in NODES) for i in range(len(SHAPES))]
    for g, w in zip(got.to_numpy_ndarrays(), mean):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_inside_deepreduce_strategy_with_stateless_clients(task_identity):
    """Lossless uplink without residuals, per-node downlink: the server's
    model is the reference's, and every node rebuilds exactly the model it
    was sent."""
    density, rho, lr = 0.05, 0.9, 0.1
    inner = FedAvgTopK(density, server_momentum=rho, server_learning_rate=lr, **sampling())
    strategy = DeepReduceStrategy(inner, {"compressor": "none", "memory": "none"},
                                  downlink="per_node")
    contexts = {n: Context(run_id=1, node_id=n, node_config={}, state=RecordDict(),
                           run_config={}) for n in NODES}
    x0 = model(0, 0.1)
    want, _ = reference(x0, 3, density, rho, lr)
    current = ArrayRecord(x0)
    for rnd in range(1, 4):
        replies = []
        for msg in strategy.configure_train(rnd, current, ConfigRecord(), Grid()):
            node = msg.metadata.dst_node_id

            def train(m, context, node=node, rnd=rnd):
                held = m.content["arrays"].to_numpy_ndarrays()
                np.testing.assert_array_equal(np.concatenate([a.ravel() for a in held]),
                                              flat(current))
                return reply(m, node, rnd, held)

            replies.append(deepreduce_mod(msg, contexts[node], train))
        current, _ = strategy.aggregate_train(rnd, replies)
        np.testing.assert_allclose(flat(current), want[rnd - 1], rtol=1e-5, atol=1e-6)
    assert strategy.rejected == []


LOSSLESS_STATELESS = {"compressor": "none", "memory": "none"}


def topk_server(density=0.05, rho=0.9, lr=0.1):
    inner = FedAvgTopK(density, server_momentum=rho, server_learning_rate=lr, **sampling())
    return DeepReduceStrategy(inner, LOSSLESS_STATELESS, downlink="per_node")


def drive(strategy, contexts, rounds, current):
    """Rounds `rounds` of `strategy` with stateless clients (through the mod):
    the aggregated model of each round, and the last one."""
    models = []
    for rnd in rounds:
        replies = [deepreduce_mod(msg, contexts[msg.metadata.dst_node_id],
                                  lambda m, c, node=msg.metadata.dst_node_id, rnd=rnd: reply(
                                      m, node, rnd, m.content["arrays"].to_numpy_ndarrays()))
                   for msg in strategy.configure_train(rnd, current, ConfigRecord(), Grid())]
        current, _ = strategy.aggregate_train(rnd, replies)
        models.append(current.to_numpy_ndarrays())
    return models, current


def fresh_contexts():
    return {n: Context(run_id=1, node_id=n, node_config={}, state=RecordDict(), run_config={})
            for n in NODES}


@pytest.mark.parametrize("stop", [1, 3])
def test_a_restarted_server_goes_on_with_its_momentum_and_error(task_identity, tmp_path, stop):
    """Saved after round `stop`, dropped, and a new strategy loaded from the
    file: the rounds after it aggregate the same models, bit for bit, as a
    server that never stopped (and both follow numpy's rule). A server that
    restarts with m and e at zero (the file without them) does not."""
    total, x0 = 5, model(0, 0.1)
    want, _ = reference(x0, total, 0.05, 0.9, 0.1)
    random.seed(3)  # Flower's sampling: the same draws in every run
    steady, _ = drive(topk_server(), fresh_contexts(), range(1, total + 1), ArrayRecord(x0))

    random.seed(3)
    contexts = fresh_contexts()  # the nodes' state outlives the server
    first = topk_server()
    before, current = drive(first, contexts, range(1, stop + 1), ArrayRecord(x0))
    path = tmp_path / "server_state.npz"
    first.save_state(str(path))
    momentum, error = first.strategy.momentum.copy(), first.strategy.error.copy()
    del first
    resumed = topk_server()
    resumed.load_state(str(path))
    np.testing.assert_array_equal(resumed.strategy.momentum, momentum)
    np.testing.assert_array_equal(resumed.strategy.error, error)
    assert np.abs(error).sum() > 0  # there is something to lose
    after, _ = drive(resumed, contexts, range(stop + 1, total + 1), current)
    for rnd, (got, same) in enumerate(zip(before + after, steady), 1):
        for a, b in zip(got, same):
            assert np.array_equal(a, b), f"round {rnd}"
        np.testing.assert_allclose(np.concatenate([a.ravel() for a in got]), want[rnd - 1],
                                   rtol=1e-5, atol=1e-6)
    # The same file without FedAvgTopK's arrays is refused; once forced in
    # (m and e at zero, what a restart lost before), the rounds differ.
    with np.load(path) as files:
        saved = {k: files[k] for k in files.files}
    header = json.loads(saved.pop("header").tobytes())
    lost = tmp_path / "lost.npz"
    np.savez(lost, header=np.frombuffer(json.dumps(dict(header, strategy=None)).encode(),
                                        np.uint8),
             **{k: v for k, v in saved.items() if not k.startswith("strategy/")})
    forgetful = topk_server()
    with pytest.raises(ValueError, match="holds no state of the wrapped 'FedAvgTopK'"):
        forgetful.load_state(str(lost))
    assert forgetful._names is None
    forgetful.load_state(str(path))
    forgetful.strategy.momentum = forgetful.strategy.error = None
    random.seed(3)  # the same draws, and the nodes as they were at the save
    contexts = fresh_contexts()
    drive(topk_server(), contexts, range(1, stop + 1), ArrayRecord(x0))
    forgot, _ = drive(forgetful, contexts, range(stop + 1, total + 1), current)
    assert not all(np.array_equal(a, b) for a, b in zip(forgot[-1], steady[-1]))


def test_a_topk_state_that_does_not_fit_is_refused_and_changes_nothing(task_identity,
                                                                        tmp_path):
    from flwr.serverapp.strategy import FedAvg

    strategy = topk_server()
    drive(strategy, fresh_contexts(), range(1, 3), ArrayRecord(model(0, 0.1)))
    path = tmp_path / "state.npz"
    strategy.save_state(str(path))
    with np.load(path) as files:
        saved = {k: files[k] for k in files.files}

    def rewrite(name, **arrays):
        p = tmp_path / f"{name}.npz"
        np.savez(p, **dict(saved, **arrays))
        return str(p)

    n = saved["strategy/error"].size
    cases = [
        (topk_server(density=0.1), str(path), "density=0.05"),
        (topk_server(rho=0.5), str(path), "server_momentum=0.9"),
        (DeepReduceStrategy(FedAvg(**sampling()), LOSSLESS_STATELESS, downlink="per_node"),
         str(path), "state of a wrapped 'FedAvgTopK'"),
        (topk_server(), rewrite("short", **{"strategy/error": np.zeros(n - 1, np.float32)}),
         r"error is float32 \(%d,\)" % (n - 1)),
        (topk_server(), rewrite("wide", **{"strategy/momentum": np.zeros(n, np.float64)}),
         "momentum is float64"),
        (topk_server(), rewrite("nan", **{"strategy/error": np.full(n, np.nan, np.float32)}),
         "NaN/Inf"),
    ]
    for other, p, match in cases:
        with pytest.raises(ValueError, match=match):
            other.load_state(p)
        assert other._names is None and other.rounds == []
        assert getattr(other.strategy, "momentum", None) is None
    # A FedAvg server's file does not load into a FedAvgTopK server.
    plain = DeepReduceStrategy(FedAvg(**sampling()), LOSSLESS_STATELESS, downlink="per_node")
    drive(plain, fresh_contexts(), range(1, 2), ArrayRecord(model(0, 0.1)))
    plain.save_state(str(tmp_path / "plain.npz"))
    with pytest.raises(ValueError, match="holds no state of the wrapped 'FedAvgTopK'"):
        topk_server().load_state(str(tmp_path / "plain.npz"))


@pytest.mark.parametrize("kwargs,match", [
    (dict(density=0), "density must be in"),
    (dict(density=1.5), "density must be in"),
    (dict(density="0.1"), "density must be a finite number"),
    (dict(density=float("nan")), "density must be a finite number"),
    (dict(density=0.1, server_momentum=1.0), "server_momentum must be in"),
    (dict(density=0.1, server_learning_rate=0), "server_learning_rate must be > 0"),
    (dict(density=True), "density must be a finite number"),
])
def test_bad_settings_say_what_is_wrong(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FedAvgTopK(**kwargs)
