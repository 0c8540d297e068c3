"""FedAvgTopK (deepreduce_tf/federated/server_topk.py): the server's sparse
update with momentum and error accumulation, against a numpy reference of
FetchSGD's server rule, alone and inside DeepReduceStrategy."""
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
