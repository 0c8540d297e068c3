"""deepreduce_tf.federated: the model codec, and the Flower strategy + client
mod driven round by round in this process (every message through the real
strategy and mod) and in Flower's simulation engine (Ray, other processes)."""
import json
import math
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from deepreduce_tf.federated.codec import ModelCodec, PayloadError, model_crc

# Trains models, starts worker processes or runs Flower (minutes):
# `pytest -m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow

SHAPES = [(3, 3, 1, 16), (16,), (400, 60), (60,), (60, 10), (10,)]
NAMES = [str(i) for i in range(len(SHAPES))]
GOLOMB_QSGD = {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
               "index": "golomb", "value": "qsgd"}
LOSSLESS = {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "index",
            "index": "golomb"}


def arrays(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(scale * rng.normal(size=s)).astype(np.float32) for s in SHAPES]


def numpy_topk(x, ratio, min_size=1024):
    """The reference: per tensor, the ceil(ratio n) largest magnitudes; tensors
    under min_size elements dense."""
    out = []
    for a in x:
        if a.size < min_size:
            out.append(a.copy())
            continue
        k = math.ceil(ratio * a.size)
        flat = a.reshape(-1)
        keep = np.argsort(-np.abs(flat), kind="stable")[:k]
        y = np.zeros_like(flat)
        y[keep] = flat[keep]
        out.append(y.reshape(a.shape))
    return out


# ---------------------------------------------------------------------------
# ModelCodec

def test_lossless_codec_decodes_numpy_topk_and_keeps_the_rest_as_residual():
    codec = ModelCodec.for_arrays(LOSSLESS, NAMES, arrays(0))
    residual = arrays(1, 0.1)
    update = arrays(2)
    payload, decoded, new_residual = codec.encode(update, residual)
    x = [u + r for u, r in zip(update, residual)]
    for got, want in zip(decoded, numpy_topk(x, 0.1)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(codec.decode(payload), decoded):  # what every receiver decodes
        np.testing.assert_array_equal(got, want)
    for xi, d, r in zip(x, decoded, new_residual):  # exact: d is x or 0 per element
        np.testing.assert_array_equal(d + r, xi)
    assert len(payload) < codec.dense_bytes / 4


def test_lossy_codec_conserves_update_plus_residual():
    codec = ModelCodec.for_arrays(GOLOMB_QSGD, NAMES, arrays(0))
    residual = codec.zeros()
    total_in, total_out = [np.zeros(s, np.float64) for s in SHAPES], None
    decoded_sum = [np.zeros(s, np.float64) for s in SHAPES]
    for step in range(5):
        update = arrays(10 + step)
        payload, decoded, residual = codec.encode(update, residual)
        total_in = [t + u for t, u in zip(total_in, update)]
        decoded_sum = [t + d for t, d in zip(decoded_sum, codec.decode(payload))]
    total_out = [d + r for d, r in zip(decoded_sum, residual)]
    for a, b in zip(total_out, total_in):  # sum of updates = sum decoded + last residual
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


def test_no_feedback_keeps_no_residual():
    codec = ModelCodec.for_arrays(dict(LOSSLESS, memory="none"), NAMES, arrays(0))
    _, decoded, residual = codec.encode(arrays(2), arrays(3))
    assert residual is None
    for got, want in zip(decoded, numpy_topk(arrays(2), 0.1)):  # the residual is ignored
        np.testing.assert_array_equal(got, want)


def test_hostile_payloads_are_refused_with_the_reason():
    codec = ModelCodec.for_arrays(GOLOMB_QSGD, NAMES, arrays(0))
    payload, _, _ = codec.encode(arrays(1))
    with pytest.raises(PayloadError, match="truncated"):
        codec.decode(payload[:-7])
    with pytest.raises(PayloadError, match="empty"):
        codec.decode(b"")
    with pytest.raises(PayloadError, match="exceeds the limit"):
        codec.decode(b"\0" * (codec.max_payload_bytes + 1))
    with pytest.raises(PayloadError, match="bytes, got str"):
        codec.decode("payload")
    rng = np.random.default_rng(0)
    for _ in range(20):  # any changed byte: refused, never a silently different model
        bad = bytearray(payload)
        bad[int(rng.integers(len(bad)))] ^= 1 << int(rng.integers(8))
        with pytest.raises(PayloadError):
            codec.decode(bytes(bad))
    other_model = ModelCodec.for_arrays(GOLOMB_QSGD, NAMES[:-1] + ["bias"], arrays(0))
    with pytest.raises(PayloadError, match="differently configured|another"):
        other_model.decode(payload)
    other_config = ModelCodec.for_arrays(dict(GOLOMB_QSGD, value="fp16"), NAMES, arrays(0))
    with pytest.raises(PayloadError):
        other_config.decode(payload)
    nan_update = arrays(1)
    nan_update[1][3] = np.nan  # a small tensor: it travels dense, NaN included
    nan_payload, _ = codec.compressor.compress_batch(nan_update, NAMES)  # a sender without checks
    with pytest.raises(PayloadError, match="NaN/Inf in tensor '1'"):
        codec.decode(nan_payload.numpy().tobytes())


def test_a_nonfinite_update_is_not_sent_and_the_residual_is_kept():
    codec = ModelCodec.for_arrays(GOLOMB_QSGD, NAMES, arrays(0))
    residual = arrays(3, 0.1)
    kept = [r.copy() for r in residual]
    update = arrays(1)
    update[2][5, 7] = np.inf
    with pytest.raises(ValueError, match="NaN/Inf in tensor '2': not sent"):
        codec.encode(update, residual)
    assert all(np.array_equal(a, b) for a, b in zip(residual, kept))


def test_bad_configuration_and_arrays_say_what_is_wrong():
    with pytest.raises(ValueError, match="no collective"):
        ModelCodec.check_params(dict(GOLOMB_QSGD, communicator="allreduce"))
    with pytest.raises(ValueError, match="'memory' must be one of"):
        ModelCodec.check_params(dict(GOLOMB_QSGD, memory="dgc"))
    with pytest.raises(ValueError, match="unknown"):
        ModelCodec.check_params(dict(GOLOMB_QSGD, colour="red"))
    with pytest.raises(TypeError, match="params must be a dict"):
        ModelCodec.check_params("topk")
    codec = ModelCodec.for_arrays(GOLOMB_QSGD, NAMES, arrays(0))
    with pytest.raises(ValueError, match="tensor '2' is float32 \\(60, 400\\)"):
        codec.encode([a.T if a.ndim == 2 else a for a in arrays(1)])
    with pytest.raises(ValueError, match="has 5 tensors"):
        codec.encode(arrays(1)[:5])
    with pytest.raises(TypeError, match="only float tensors"):
        ModelCodec.for_arrays(GOLOMB_QSGD, ["a"], [np.zeros(4, np.int32)])


def test_without_flower_the_codec_works_and_the_error_says_what_to_install(tmp_path):
    code = textwrap.dedent("""
        import sys
        sys.modules["flwr"] = None  # as if Flower were not installed
        import deepreduce_tf, deepreduce_tf.federated as fed
        assert fed.ModelCodec is not None
        try:
            fed.DeepReduceStrategy
        except ImportError as e:
            print("ImportError:", e)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "needs Flower" in proc.stdout and "deepreduce_tf[federated]" in proc.stdout


# ---------------------------------------------------------------------------
# Flower: the strategy and the mod, round by round in this process

flwr = pytest.importorskip("flwr")
from flwr.app import (ArrayRecord, ConfigRecord, Context, Error, Message,  # noqa: E402
                      MetricRecord, RecordDict)
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from deepreduce_tf.federated import flower  # noqa: E402
from deepreduce_tf.federated.flower import (DeepReduceStrategy, RowwiseMean,  # noqa: E402
                                          deepreduce_mod)


@pytest.fixture
def task_identity(monkeypatch):
    """Messages need the identity Flower's runtime sets in its processes."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


class Grid:
    def __init__(self, node_ids):
        self.node_ids = list(node_ids)

    def get_node_ids(self):
        return list(self.node_ids)


def target(node):
    return arrays(100 + node, 0.5)


def train_fn(log):
    """A client: one step toward its own target model; logs what it received
    and its update."""

    def train(msg, context):
        node = context.node_id
        received = msg.content["arrays"].to_numpy_ndarrays()
        local = [w + 0.5 * (t - w) for w, t in zip(received, target(node))]
        log.append({"node": node, "crc": model_crc(received),
                    "delta": [a - b for a, b in zip(local, received)]})
        return Message(RecordDict({"arrays": ArrayRecord(local),
                                   "metrics": MetricRecord({"num-examples": 10 + node})}),
                       reply_to=msg)

    return train


def run_rounds(strategy, contexts, rounds, client_mods=None, log=None, first=1, model=None,
               train=None):
    """Drives `rounds` training rounds; returns the model and the messages'
    byte counts measured here (down, up), per round."""
    log = [] if log is None else log
    train = train or train_fn(log)
    grid = Grid(contexts)
    model = model or ArrayRecord(arrays(0, 0.1))
    measured = []
    for rnd in range(first, first + rounds):
        down = up = 0
        replies = []
        for msg in strategy.configure_train(rnd, model, ConfigRecord(), grid):
            down += sum(len(a.data) if a.stype == flower.STYPE else a.numpy().nbytes
                        for a in msg.content["arrays"].values())
            context = contexts[msg.metadata.dst_node_id]
            handler = (client_mods or {}).get(context.node_id, deepreduce_mod)
            try:
                reply = handler(msg, context, train)
            except Exception as e:  # what Flower's ClientApp runtime does
                reply = Message(Error(code=1, reason=str(e)), reply_to=msg)
            if not reply.has_error():
                up += sum(len(a.data) for a in reply.content["arrays"].values())
            replies.append(reply)
        new, _ = strategy.aggregate_train(rnd, replies)
        if new is not None:
            model = new
        measured.append((down, up))
    return model, measured


def contexts_for(nodes):
    return {n: Context(run_id=1, node_id=n, node_config={}, state=RecordDict(), run_config={})
            for n in nodes}


def fedavg(n):
    return FedAvg(fraction_train=1.0, min_train_nodes=n, min_available_nodes=n,
                  fraction_evaluate=0.0)


def test_rounds_accounting_identical_models_and_conservation(task_identity):
    contexts = contexts_for([1, 2, 3])
    inner = fedavg(3)
    decoded = {n: [] for n in contexts}
    aggregate = inner.aggregate_train

    def capture(rnd, replies):  # what the wrapped FedAvg gets: x + D(payload) per client
        source = strategy._source
        for msg in replies:
            model = msg.content["arrays"].to_numpy_ndarrays()
            decoded[msg.metadata.src_node_id].append([m - s for m, s in zip(model, source)])
        return aggregate(rnd, replies)

    inner.aggregate_train = capture
    strategy = DeepReduceStrategy(inner, GOLOMB_QSGD, downlink="versions")
    log = []
    _, measured = run_rounds(strategy, contexts, 4, log=log)

    # Accounting equals the payloads measured on the messages, per round and direction.
    assert [(r["down_bytes"], r["up_bytes"]) for r in strategy.rounds] == measured
    totals = strategy.totals()
    dense = sum(int(np.prod(s)) * 4 for s in SHAPES)
    assert totals["fedavg_down_bytes"] == totals["fedavg_up_bytes"] == 12 * dense
    assert totals["up_bytes"] == sum(u for _, u in measured) < 0.3 * 12 * dense
    # Rounds 2-4 each made one version, sent whole to every (all sampled) client.
    assert totals["versions"] == 3 and 0 < totals["version_ratio"] < 0.3
    assert [r["version_bytes"] * 3 for r in strategy.rounds[1:]] == [d for d, _ in measured[1:]]
    # Round 1 sends the dense model; later rounds one version's payload per client.
    assert measured[0][0] == 3 * dense and all(d < 0.3 * 3 * dense for d, _ in measured[1:])
    # Every client rebuilt the server's x^ bit for bit (also checked by the mod's CRC).
    crc_by_round = {}
    for i, entry in enumerate(log):
        crc_by_round.setdefault(i // 3, set()).add(entry["crc"])
    assert all(len(c) == 1 for c in crc_by_round.values())
    for n, context in contexts.items():
        stored = context.state[flower._STATE_MODEL].to_numpy_ndarrays()
        assert model_crc(stored) == model_crc(strategy.model_hat)
    # Client error feedback: sum of its updates = sum the server decoded + its residual.
    for n, context in contexts.items():
        residual = context.state[flower._STATE_RESIDUAL].to_numpy_ndarrays()
        deltas = [e["delta"] for e in log if e["node"] == n]
        for i in range(len(SHAPES)):
            sent = sum(np.float64(d[i]) for d in deltas)
            got = sum(np.float64(d[i]) for d in decoded[n]) + residual[i]
            np.testing.assert_allclose(got, sent, rtol=0, atol=2e-5)
    # Server error feedback: x^ trails the model by what is still unsent, which
    # stays bounded (it is sent in later versions).
    gap = [np.abs(a - b).max() for a, b in zip(strategy._source, strategy.model_hat)]
    assert 0 < max(gap) < 0.5


def test_partial_participation_sends_the_missed_versions(task_identity):
    """2 of 5 clients per round: a client sampled again gets the chain of the
    versions it missed (or the dense model where that is smaller), and
    rebuilds the server's x^ bit for bit."""
    random.seed(0)  # FedAvg's sampling
    contexts = contexts_for(range(1, 6))
    strategy = DeepReduceStrategy(
        FedAvg(fraction_train=0.4, min_train_nodes=2, min_available_nodes=5,
               fraction_evaluate=0.0), GOLOMB_QSGD, downlink="versions")
    chains = []
    mod = deepreduce_mod

    def spy(msg, context, call_next):
        cfg = msg.content[flower.CONFIG_KEY]
        chains.append((cfg["base"], cfg["version"], len(msg.content["arrays"])))
        reply = mod(msg, context, call_next)
        stored = context.state[flower._STATE_MODEL].to_numpy_ndarrays()
        assert model_crc(stored) == model_crc(strategy.model_hat)
        return reply

    _, measured = run_rounds(strategy, contexts, 8, client_mods={n: spy for n in contexts})
    assert [(r["down_bytes"], r["up_bytes"]) for r in strategy.rounds] == measured
    long_chains = [(b, v, n) for b, v, n in chains if b >= 0 and v - b >= 2]
    assert long_chains and all(n == v - b for b, v, n in long_chains)
    assert any(b < 0 for b, v, n in chains[2:])  # first contacts get the dense model


def per_node_strategy(n_sampled, n_nodes, **kwargs):
    return DeepReduceStrategy(
        FedAvg(fraction_train=n_sampled / n_nodes, min_train_nodes=n_sampled,
               min_available_nodes=n_nodes, fraction_evaluate=0.0), GOLOMB_QSGD,
        downlink="per_node", **kwargs)


def test_per_node_downlink_sends_one_payload_over_what_the_node_holds(task_identity):
    """downlink='per_node', 2 of 5 clients per round: a node gets the dense
    model at first contact, then one payload whatever it missed; what it
    rebuilds is bit for bit the server's record of it, which is the model it
    held plus the payload decoded independently."""
    random.seed(1)  # FedAvg's sampling
    contexts = contexts_for(range(1, 6))
    strategy = per_node_strategy(2, 5)
    seen, held = [], {}

    def spy(msg, context, call_next):  # the model the node held before this message
        cfg = msg.content[flower.CONFIG_KEY]
        node = context.node_id
        seen.append({"node": node, "base": cfg["base"], "before": held.get(node),
                     "record": msg.content["arrays"]})
        reply = deepreduce_mod(msg, context, call_next)
        held[node] = context.state[flower._STATE_MODEL].to_numpy_ndarrays()
        seen[-1]["rebuilt"] = held[node]
        assert model_crc(held[node]) == model_crc(strategy.node_model(node))
        return reply

    model, measured = run_rounds(strategy, contexts, 10, client_mods={n: spy for n in contexts})
    assert [(r["down_bytes"], r["up_bytes"]) for r in strategy.rounds] == measured
    dense = sum(int(np.prod(s)) * 4 for s in SHAPES)
    reader = ModelCodec(GOLOMB_QSGD, NAMES, SHAPES, ["float32"] * len(SHAPES))
    firsts = set()
    for e in seen:
        if e["node"] not in firsts:
            firsts.add(e["node"])
            assert e["base"] == flower.BASE_DENSE and e["before"] is None
            continue
        assert e["base"] == flower.BASE_NODE and list(e["record"].keys()) == ["payload.0"]
        payload = e["record"]["payload.0"].data
        assert len(payload) < 0.3 * dense
        delta = reader.decode(payload)
        for h, d, r in zip(e["before"], delta, e["rebuilt"]):
            np.testing.assert_array_equal(h + d, r)
    # Messages after the first contacts: one payload each, whatever was missed.
    assert len(firsts) == 5 and len(seen) == 20
    totals = strategy.totals()
    assert totals["versions"] == 0 and totals["version_ratio"] is None
    assert totals["down_bytes"] == 5 * dense + sum(
        len(e["record"]["payload.0"].data) for e in seen if e["base"] == flower.BASE_NODE)
    # Per-node error feedback: the last round's payloads (top-k of x minus
    # what the node held) brought each node closer to the model x it was
    # sent (strategy._source until the next round), and what is unsent stays
    # in the difference for next time.
    x = strategy._source
    for e in seen[-2:]:
        before = math.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(x, e["before"])))
        after = math.sqrt(sum(float(np.sum((a - b) ** 2))
                              for a, b in zip(x, strategy.node_model(e["node"]))))
        assert 0 < after < 0.95 * before


def test_initial_on_clients_sends_no_dense_model(task_identity, caplog):
    """initial_on_clients: a node never seen holds the initial model (built by
    DeepReduceMod(initial_model=...)), so every message is one payload; a
    node whose mod cannot build it, or builds another one, answers with an
    error and gets the dense model next time."""
    contexts = contexts_for([1, 2, 3])
    initial = arrays(0, 0.1)  # run_rounds' initial model
    good = flower.DeepReduceMod(initial_model=lambda: [a.copy() for a in initial])
    other = flower.DeepReduceMod(initial_model=lambda: arrays(7, 0.1))
    strategy = DeepReduceStrategy(fedavg(3), GOLOMB_QSGD, downlink="per_node",
                                  initial_on_clients=True)
    bases = []

    def recorder(mod):
        def spy(msg, context, call_next):
            bases.append((context.node_id, msg.content[flower.CONFIG_KEY]["base"]))
            return mod(msg, context, call_next)
        return spy

    mods = {1: recorder(good), 2: recorder(deepreduce_mod), 3: recorder(other)}
    _, measured = run_rounds(strategy, contexts, 3, client_mods=mods)
    dense = sum(int(np.prod(s)) * 4 for s in SHAPES)
    assert [b for n, b in bases if n == 1] == [flower.BASE_NODE] * 3
    # Nodes 2 and 3 fail their first round, then get the dense model.
    for n in (2, 3):
        assert [b for m, b in bases if m == n] == [flower.BASE_NODE, flower.BASE_DENSE,
                                                   flower.BASE_NODE]
    assert [r["up_messages"] for r in strategy.rounds] == [1, 3, 3]
    assert measured[0][0] < 0.3 * 3 * dense  # round 1: three payloads, no dense model
    assert model_crc(contexts[1].state[flower._STATE_MODEL].to_numpy_ndarrays()) == model_crc(
        strategy.node_model(1))


def test_per_node_models_are_bounded_least_recent_out(task_identity):
    random.seed(2)  # FedAvg's sampling order
    contexts = contexts_for([1, 2, 3])
    dense = sum(int(np.prod(s)) * 4 for s in SHAPES)
    strategy = DeepReduceStrategy(fedavg(3), GOLOMB_QSGD, downlink="per_node",
                                  node_memory_bytes=2 * dense)
    order = []

    def spy(msg, context, call_next):
        order.append((context.node_id, msg.content[flower.CONFIG_KEY]["base"]))
        return deepreduce_mod(msg, context, call_next)

    run_rounds(strategy, contexts, 4, client_mods={n: spy for n in contexts})
    assert len(strategy._held) == 2 and strategy._held_bytes == 2 * dense
    # Reference: an LRU of two models in the order the messages were made; a
    # node it no longer holds gets the dense model.
    lru, expected = [], []
    for node, _ in order:
        expected.append(flower.BASE_NODE if node in lru else flower.BASE_DENSE)
        lru = [n for n in lru if n != node][-1:] + [node]
    assert [b for _, b in order] == expected and flower.BASE_NODE in expected
    with pytest.raises(ValueError, match="downlink must be one of"):
        DeepReduceStrategy(fedavg(1), GOLOMB_QSGD, downlink="broadcast")
    with pytest.raises(ValueError, match="needs downlink='per_node'"):
        DeepReduceStrategy(fedavg(1), GOLOMB_QSGD, initial_on_clients=True, downlink="versions")
    with pytest.raises(ValueError, match="node_memory_bytes"):
        DeepReduceStrategy(fedavg(1), GOLOMB_QSGD, downlink="per_node", node_memory_bytes=-1)
    with pytest.raises(TypeError, match="initial_model must be a function"):
        flower.DeepReduceMod(initial_model=arrays(0))


def test_lossless_uplink_and_dense_downlink_is_fedavg(task_identity):
    """With a lossless configuration and the model sent dense, the wrapped
    FedAvg computes what plain FedAvg computes (up to float rounding)."""
    contexts = contexts_for([1, 2, 3])
    strategy = DeepReduceStrategy(fedavg(3), {"compressor": "none"}, downlink=False)
    model, measured = run_rounds(strategy, contexts, 2)
    want = arrays(0, 0.1)
    for _ in range(2):
        weights = [10 + n for n in contexts]
        local = [[w + 0.5 * (t - w) for w, t in zip(want, target(n))] for n in contexts]
        want = [sum(wt * loc[i] for wt, loc in zip(weights, local)) / sum(weights)
                for i in range(len(SHAPES))]
    for got, ref in zip(model.to_numpy_ndarrays(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    dense = sum(int(np.prod(s)) * 4 for s in SHAPES)
    assert all(d == 3 * dense for d, _ in measured)


def _fedavgm_reference(x, mean, state, lr=0.7, momentum=0.9):
    grad = [w - m for w, m in zip(x, mean)]
    v = state.get("v")
    state["v"] = grad if v is None else [momentum * a + g for a, g in zip(v, grad)]
    return [w - lr * a for w, a in zip(x, state["v"])]


def _fedadam_reference(x, mean, state, eta=0.05, b1=0.9, b2=0.99, tau=1e-3):
    """Flower's FedAdam: Adam on the server over delta = mean - x, its
    learning rate bias-corrected with round + 1."""
    delta = [m - w for m, w in zip(mean, x)]
    state["t"] = state.get("t", 0) + 1
    m = state.get("m", [np.zeros_like(d) for d in delta])
    v = state.get("v", [np.zeros_like(d) for d in delta])
    state["m"] = [b1 * a + (1 - b1) * d for a, d in zip(m, delta)]
    state["v"] = [b2 * a + (1 - b2) * d * d for a, d in zip(v, delta)]
    eta_t = eta * np.sqrt(1 - b2 ** (state["t"] + 1)) / (1 - b1 ** (state["t"] + 1))
    return [w + eta_t * a / (np.sqrt(b) + tau) for w, a, b in zip(x, state["m"], state["v"])]


@pytest.mark.parametrize("downlink", [False, "per_node"])
@pytest.mark.parametrize("server", ["fedavgm", "fedadam"])
def test_a_wrapped_server_optimizer_applies_its_rule_to_the_decoded_updates(task_identity,
                                                                            server, downlink):
    """A server optimizer inside the wrapper, lossless both ways: the model
    after 3 rounds is numpy's rule over the clients' updates. FedAdam computes
    in float64: the clients get the model's float32 (what they would cast it
    to), and the wrapper does not refuse the strategy's model."""
    from flwr.serverapp.strategy import FedAdam, FedAvgM

    sampling = dict(fraction_train=1.0, min_train_nodes=3, min_available_nodes=3,
                    fraction_evaluate=0.0)
    if server == "fedavgm":
        inner = FedAvgM(**sampling, server_learning_rate=0.7, server_momentum=0.9)
        rule = _fedavgm_reference
    else:
        inner = FedAdam(**sampling, eta=0.05, beta_1=0.9, beta_2=0.99, tau=1e-3)
        rule = _fedadam_reference
    contexts = contexts_for([1, 2, 3])
    strategy = DeepReduceStrategy(inner, {"compressor": "none"}, downlink=downlink)
    log = []
    model, _ = run_rounds(strategy, contexts, 3, log=log)
    want, state = [a.astype(np.float64) for a in arrays(0, 0.1)], {}
    for rnd in range(3):
        sent = [a.astype(np.float32) for a in want]  # what the clients hold
        if rnd == 0:
            assert [e["crc"] for e in log[:3]] == [model_crc(sent)] * 3
        weights = [10 + n for n in contexts]
        local = [[w + 0.5 * (t - w) for w, t in zip(sent, target(n))] for n in contexts]
        mean = [sum(wt * loc[i] for wt, loc in zip(weights, local)) / sum(weights)
                for i in range(len(SHAPES))]
        want = rule(want, mean, state)
    for got, ref in zip(model.to_numpy_ndarrays(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


ROWS = {1: [0, 1, 2], 2: [2, 3], 3: [3, 399]}  # the rows of table "2" each client changes


def rows_train(msg, context):
    """A recommender-like client: changes a few rows of the table "2" and all
    of array "4"."""
    node = context.node_id
    local = [a.copy() for a in msg.content["arrays"].to_numpy_ndarrays()]
    local[2][ROWS[node]] += np.float32(node)
    local[4] += np.float32(0.1 * node)
    return Message(RecordDict({"arrays": ArrayRecord(local),
                               "metrics": MetricRecord({"num-examples": 10 * node})}),
                   reply_to=msg)


@pytest.mark.parametrize("compressed", [False, True])
def test_rowwise_mean_averages_a_row_over_the_clients_that_changed_it(task_identity,
                                                                      compressed):
    contexts = contexts_for([1, 2, 3])
    strategy = RowwiseMean(fedavg(3), keys=["2"])
    mods = {n: (lambda msg, context, call_next: call_next(msg, context)) for n in contexts}
    if compressed:  # lossless and dense both ways: the decoded updates are the clients'
        strategy = DeepReduceStrategy(strategy, {"compressor": "none"}, downlink=False)
        mods = None
    start = arrays(0, 0.1)
    model, _ = run_rounds(strategy, contexts, 1, client_mods=mods, model=ArrayRecord(start),
                          train=rows_train)
    got = model.to_numpy_ndarrays()
    want = [a.copy() for a in start]
    weight = {n: 10.0 * n for n in contexts}
    for row in range(SHAPES[2][0]):
        touching = [n for n in contexts if row in ROWS[n]]
        if touching:  # weighted mean of the changes over the clients that made them
            want[2][row] += sum(weight[n] * n for n in touching) / sum(
                weight[n] for n in touching)
    want[4] += sum(weight[n] * 0.1 * n for n in contexts) / sum(weight.values())  # FedAvg
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    # Plain FedAvg would have given row 0 a third of client 1's change (1 * 10 / 60).
    assert got[2][0] - start[2][0] == pytest.approx(np.ones(60, np.float32), abs=1e-5)


def test_rowwise_mean_leaves_out_a_client_whose_table_does_not_fit(task_identity, caplog):
    contexts = contexts_for([1, 2, 3])
    strategy = RowwiseMean(fedavg(2), keys=["2"])
    passthrough = {n: (lambda msg, context, call_next: call_next(msg, context))
                   for n in contexts}

    def train(msg, context):
        reply = rows_train(msg, context)
        if context.node_id == 3:  # a table of another shape
            local = reply.content["arrays"].to_numpy_ndarrays()
            local[2] = local[2][:10]
            reply.content["arrays"] = ArrayRecord(local)
        return reply

    start = arrays(0, 0.1)
    with caplog.at_level("WARNING", logger="deepreduce_tf.federated"):
        model, _ = run_rounds(strategy, contexts, 1, client_mods=passthrough,
                              model=ArrayRecord(start), train=train)
    assert "left out the update of node 3: its array '2' is float32 (10, 60)" in caplog.text
    got = model.to_numpy_ndarrays()
    want = start[2].copy()
    want[[0, 1]] += 1.0          # client 1 alone
    want[2] += (10 * 1 + 20 * 2) / 30  # clients 1 and 2
    want[3] += 2.0               # client 2 alone (client 3 left out)
    np.testing.assert_allclose(got[2], want, rtol=0, atol=1e-5)


def test_rowwise_mean_refuses_what_is_not_a_table(task_identity):
    model = ArrayRecord(arrays(0))
    with pytest.raises(ValueError, match=r"has no arrays \['9'\]"):
        RowwiseMean(fedavg(3), ["9"]).configure_train(1, model, ConfigRecord(), Grid([1, 2, 3]))
    with pytest.raises(ValueError, match="'1' has shape .* not a table"):
        RowwiseMean(fedavg(3), ["1"]).configure_train(1, model, ConfigRecord(), Grid([1, 2, 3]))
    with pytest.raises(TypeError, match="wraps a flwr.serverapp.strategy.Strategy"):
        RowwiseMean(object(), ["2"])


def hostile(kind):
    """A client mod that spoils the compressed reply of deepreduce_mod."""

    def mod(msg, context, call_next):
        reply = deepreduce_mod(msg, context, call_next)
        record = reply.content["arrays"]
        data = record[flower.PAYLOAD_KEY].data
        if kind == "truncated":
            data = data[: len(data) // 2]
        elif kind == "corrupted":
            data = bytearray(data)
            data[len(data) // 3] ^= 0x10
            data = bytes(data)
        elif kind == "oversized":
            data = data + b"\0" * (20 * len(data) + 10 ** 6)
        elif kind == "foreign":
            other = ModelCodec.for_arrays(GOLOMB_QSGD, [f"w{i}" for i in range(len(SHAPES))],
                                          arrays(0))
            data, _, _ = other.encode(arrays(5))
        elif kind == "dense":  # a client without the mod: the model's arrays
            reply.content["arrays"] = ArrayRecord(arrays(5))
            return reply
        record[flower.PAYLOAD_KEY] = flower._payload_array(data)
        return reply

    return mod


def test_broken_and_hostile_clients_are_left_out_of_the_round(task_identity, caplog):
    kinds = ["truncated", "corrupted", "oversized", "foreign", "dense"]
    contexts = contexts_for(range(1, 8))
    mods = {i + 1: hostile(k) for i, k in enumerate(kinds)}  # nodes 6 and 7 are honest
    strategy = DeepReduceStrategy(fedavg(7), GOLOMB_QSGD, downlink="versions")
    with caplog.at_level("WARNING", logger="deepreduce_tf.federated"):
        model, _ = run_rounds(strategy, contexts, 2, client_mods=mods)
    reasons = {(rnd, node): reason for rnd, node, reason in strategy.rejected}
    assert sorted(reasons) == [(r, n) for r in (1, 2) for n in range(1, 6)]
    assert "truncated" in reasons[1, 1]
    assert "corrupt" in reasons[1, 2] or "checksum" in reasons[1, 2].lower()
    assert "exceeds the limit" in reasons[1, 3]
    assert "differently configured" in reasons[1, 4]
    assert "expected one array 'payload'" in reasons[1, 5]
    assert caplog.text.count("rejected the update of node") == 10
    assert [r["up_messages"] for r in strategy.rounds] == [2, 2]
    # The round is the FedAvg of the two honest clients only.
    assert all(np.all(np.isfinite(a)) for a in model.to_numpy_ndarrays())


def test_a_client_that_lost_its_state_gets_the_whole_model_next(task_identity):
    contexts = contexts_for([1, 2])
    strategy = DeepReduceStrategy(fedavg(2), GOLOMB_QSGD, downlink="versions")
    model, _ = run_rounds(strategy, contexts, 1)
    contexts[2] = contexts_for([2])[2]  # node 2 restarted without its state
    model, _ = run_rounds(strategy, contexts, 1, first=2, model=model)
    assert strategy.rounds[-1]["up_messages"] == 1  # node 2 could not apply the chain
    assert 2 not in strategy._synced
    _, measured = run_rounds(strategy, contexts, 1, first=3, model=model)
    dense = sum(int(np.prod(s)) * 4 for s in SHAPES)
    assert dense < measured[0][0] < 1.5 * dense  # node 2 got the dense model again
    assert strategy.rounds[-1]["up_messages"] == 2


def test_protocol_and_configuration_errors(task_identity):
    with pytest.raises(TypeError, match="wraps a flwr.serverapp.strategy.Strategy"):
        DeepReduceStrategy(object(), GOLOMB_QSGD)
    with pytest.raises(ValueError, match="unknown"):
        DeepReduceStrategy(fedavg(1), dict(GOLOMB_QSGD, colour="red"))
    with pytest.raises(TypeError, match="params must be a dict"):
        DeepReduceStrategy(fedavg(1), "topk")
    contexts = contexts_for([1])
    strategy = DeepReduceStrategy(fedavg(1), GOLOMB_QSGD, downlink="versions")
    msg = next(iter(strategy.configure_train(1, ArrayRecord(arrays(0)), ConfigRecord(),
                                             Grid([1]))))
    msg.content[flower.CONFIG_KEY]["protocol"] = 99
    with pytest.raises(ValueError, match="protocol 99"):
        deepreduce_mod(msg, contexts[1], train_fn([]))
    # A message without DeepReduce's record passes through unchanged.
    plain = Message(RecordDict({"arrays": ArrayRecord(arrays(0))}), dst_node_id=1,
                    message_type="train")
    seen = []
    deepreduce_mod(plain, contexts[1], lambda m, c: seen.append(m) or m)
    assert seen == [plain]


# ---------------------------------------------------------------------------
# Flower's simulation engine: 3 clients in Ray worker processes

SIMULATION = textwrap.dedent("""
    import json, sys
    import numpy as np
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation
    from deepreduce_tf.federated import DeepReduceStrategy, deepreduce_mod, model_crc

    SHAPES = {shapes!r}
    client = ClientApp(mods=[deepreduce_mod])

    @client.train()
    def train(msg, context):
        received = msg.content["arrays"].to_numpy_ndarrays()
        rng = np.random.default_rng(context.node_id % 1000)
        local = [w - 0.1 * rng.normal(size=w.shape).astype(np.float32) for w in received]
        kept = int("deepreduce.residual" in context.state)  # the residual of its last round
        return Message(RecordDict({{"arrays": ArrayRecord(local), "metrics": MetricRecord(
            {{"num-examples": 10, "crc": model_crc(received) % 1000003, "kept": kept}})}}),
            reply_to=msg)

    server = ServerApp()
    out = {{}}

    @server.main()
    def main(grid, context):
        strategy = DeepReduceStrategy(FedAvg(fraction_train=1.0, min_train_nodes=3,
                                             min_available_nodes=3, fraction_evaluate=0.0),
                                      {params!r}, downlink="versions")
        crcs, kept = [], []
        aggregate = strategy.strategy.train_metrics_aggr_fn
        def metrics(contents, key):
            crcs.append(sorted(int(c["metrics"]["crc"]) for c in contents))
            kept.append(sorted(int(c["metrics"]["kept"]) for c in contents))
            return aggregate(contents, key)
        strategy.strategy.train_metrics_aggr_fn = metrics
        rng = np.random.default_rng(0)
        init = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=3)
        out.update(rounds=strategy.rounds, rejected=strategy.rejected, crcs=crcs, kept=kept,
                   totals=strategy.totals(),
                   model_hat_crc=model_crc(strategy.model_hat) % 1000003,
                   final_crc=model_crc(result.arrays.to_numpy_ndarrays()) % 1000003)

    run_simulation(server_app=server, client_app=client, num_supernodes=3,
                   backend_config={{"client_resources": {{"num_cpus": 1}}}})
    print("RESULT " + json.dumps(out))
""")


def test_flower_simulation_three_clients(tmp_path):
    script = tmp_path / "simulation.py"
    script.write_text(SIMULATION.format(shapes=SHAPES, params=GOLOMB_QSGD))
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")  # the installed deepreduce_tf
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["rejected"] == []
    assert [r["up_messages"] for r in out["rounds"]] == [3, 3, 3]
    # All three clients trained from the same model, in every round.
    assert len(out["crcs"]) == 3 and all(len(set(c)) == 1 for c in out["crcs"])
    # Each client's residual outlived its ClientApp: present from its second round on.
    assert out["kept"] == [[0, 0, 0], [1, 1, 1], [1, 1, 1]]
    totals = out["totals"]
    assert totals["up_bytes"] == sum(r["up_bytes"] for r in out["rounds"])
    assert totals["down_bytes"] == sum(r["down_bytes"] for r in out["rounds"])
    assert 0 < totals["up_ratio"] < 0.3 and 0 < totals["down_ratio"] < 0.6


# ---------------------------------------------------------------------------
# A real deployment: a SuperLink and three SuperNodes, one process each, on
# 127.0.0.1 (Flower 1.41's Fleet API: HTTP), the app submitted with `flwr run`

APP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "federated_app")


def test_deployment_superlink_and_three_supernodes(tmp_path):
    import shutil
    import time

    import processes

    superlink_bin = processes.flower_tool("flower-superlink")
    supernode_bin = processes.flower_tool("flower-supernode")
    flwr_bin = processes.flower_tool("flwr")
    app = tmp_path / "app"
    shutil.copytree(APP_DIR, app, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "home").mkdir()
    (tmp_path / "flwr_home").mkdir()
    env = processes.flower_env(tmp_path / "flwr_home", HOME=str(tmp_path / "home"),
                               UV_OFFLINE="1")
    link, *nodes = processes.free_ports(4)
    deadline = time.monotonic() + 420
    procs, logs = [], []

    def start(name, args):
        log = open(tmp_path / f"{name}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(args, cwd=tmp_path, env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
        return procs[-1]

    def tails():
        return "\n".join(f"--- {p.name}\n" + p.read_text()[-1500:]
                         for p in sorted(tmp_path.glob("*.log")))

    def healthy(port, proc, name):
        processes.wait_healthy(port, deadline, proc, name, tails)

    def flwr(*args, timeout=60):
        return subprocess.run([flwr_bin, *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout)

    out = tmp_path / "result.json"
    try:
        superlink = start("superlink", [superlink_bin, "--insecure", "--host", "127.0.0.1",
                                        "--port", str(link),
                                        "--disable-runtime-dependency-installation"])
        healthy(link, superlink, "superlink")
        for i, port in enumerate(nodes):
            start(f"supernode{i}", [supernode_bin, "--insecure",
                                    "--superlink", f"127.0.0.1:{link}", "--host", "127.0.0.1",
                                    "--port", str(port), "--node-config",
                                    f"partition-id={i} num-partitions=3",
                                    "--max-retries", "20", "--max-wait-time", "60"])
        for i, port in enumerate(nodes):
            healthy(port, procs[i + 1], f"supernode{i}")
        (tmp_path / "flwr_home" / "config.toml").write_text(
            f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\n'
            f'address = "127.0.0.1:{link}"\ninsecure = true\n')
        run = flwr("run", str(app), "deploy", "--format", "json", "--run-config",
                   f'out="{out}" num-rounds=2', timeout=120)
        submitted = json.loads(run.stdout or "{}")
        assert run.returncode == 0 and submitted.get("success"), run.stdout + run.stderr
        run_id = str(submitted["run-id"])
        status = ""
        while time.monotonic() < deadline and not status.startswith("finished"):
            time.sleep(2)
            listed = flwr("ls", "deploy", "--run-id", run_id, "--format", "json")
            try:
                status = json.loads(listed.stdout)["runs"][0]["status"]
            except (ValueError, KeyError, IndexError):
                status = ""
        if status != "finished:completed":
            log = flwr("log", run_id, "deploy", "--show")
            pytest.fail(f"run status {status!r}\n{log.stdout[-3000:]}\n{tails()}")
    finally:
        signalled = processes.stop([], procs)
        for log in logs:
            log.close()
    assert not [pid for pid in signalled if processes.alive(pid)]  # all stopped and reaped
    result = json.loads(out.read_text())
    assert result["rejected"] == []
    assert [r["up_messages"] for r in result["rounds"]] == [3, 3]
    assert all(len(set(c)) == 1 for c in result["crcs"]) and len(result["crcs"]) == 2
    totals = result["totals"]
    assert totals["up_bytes"] == sum(r["up_bytes"] for r in result["rounds"])
    dense = sum(4 * int(np.prod(s)) for s in [(400, 60), (60,), (60, 10), (10,)])
    assert result["rounds"][0]["down_bytes"] == 3 * dense  # first contact: the dense model
    assert 0 < result["rounds"][1]["down_bytes"] < 0.3 * 3 * dense  # then one version each
    assert 0 < totals["up_ratio"] < 0.3


# ---------------------------------------------------------------------------
# The server's state survives a restart of the server process

def _resumed_matches_uninterrupted(tmp_path, make, mods_of=None, rounds=(3, 3)):
    """Runs rounds[0] + rounds[1] rounds without a stop, then again with the
    strategy saved after rounds[0] and a new one loaded from the file: the
    messages, the clients' models and residuals, the global model and the
    accounting are the same bit for bit."""
    total = sum(rounds)
    runs = []
    for stop in (None, rounds[0]):
        random.seed(5)  # FedAvg's sampling: the same draws in both runs
        flower._CLIENT_CODECS._cache.clear()  # the clients' encoders start afresh in both
        contexts = contexts_for(range(1, 6))
        mods = mods_of() if mods_of else None
        log = []
        strategy = make()
        if stop is None:
            model, measured = run_rounds(strategy, contexts, total, client_mods=mods, log=log)
        else:
            model, measured = run_rounds(strategy, contexts, stop, client_mods=mods, log=log)
            path = tmp_path / "server_state.npz"
            strategy.save_state(str(path))
            del strategy  # the server process stops; a new one loads the file
            strategy = make()
            strategy.load_state(str(path))
            model, more = run_rounds(strategy, contexts, total - stop, client_mods=mods,
                                     log=log, first=stop + 1, model=model)
            measured = measured + more
        runs.append((strategy, contexts, model, measured, log))
    (a, ca, ma, meas_a, log_a), (b, cb, mb, meas_b, log_b) = runs
    assert meas_a == meas_b
    assert [e["crc"] for e in log_a] == [e["crc"] for e in log_b]
    for x, y in zip(ma.to_numpy_ndarrays(), mb.to_numpy_ndarrays()):
        np.testing.assert_array_equal(x, y)
    for node in ca:
        for key in (flower._STATE_MODEL, flower._STATE_RESIDUAL):
            if key in ca[node].state:
                assert model_crc(ca[node].state[key].to_numpy_ndarrays()) == model_crc(
                    cb[node].state[key].to_numpy_ndarrays())
    assert a.rounds == b.rounds and a.totals() == b.totals()
    return a, b


@pytest.mark.parametrize("params", [GOLOMB_QSGD, dict(GOLOMB_QSGD, bits=1, compress_ratio=0.3),
                                    dict(GOLOMB_QSGD, bits=2, compress_ratio=0.35,
                                         topk_scope="bucket")],
                         ids=["qsgd8", "qsgd1", "qsgd2_whole_model"])
def test_per_node_server_state_resumes_bit_exact(task_identity, tmp_path, params):
    """downlink='per_node', initial_on_clients, 2 of 5 nodes per round: each
    node's model, the nodes seen and the accounting come back from the
    file, so the resumed server sends what the uninterrupted one sends."""
    initial = arrays(0, 0.1)

    def make():
        return DeepReduceStrategy(
            FedAvg(fraction_train=0.4, min_train_nodes=2, min_available_nodes=5,
                   fraction_evaluate=0.0), params, downlink="per_node", initial_on_clients=True)

    def mods():
        mod = flower.DeepReduceMod(initial_model=lambda: [a.copy() for a in initial])
        return {n: mod for n in range(1, 6)}

    a, b = _resumed_matches_uninterrupted(tmp_path, make, mods)
    assert list(a._held) == list(b._held)  # least recently sent first, as before
    assert a.totals()["down_ratio"] < 0.5


def test_versions_server_state_resumes_bit_exact(task_identity, tmp_path):
    """downlink='versions': x^ and the chain of versions come back, so a node
    that missed rounds across the restart gets the same chain."""
    def make():
        return DeepReduceStrategy(
            FedAvg(fraction_train=0.4, min_train_nodes=2, min_available_nodes=5,
                   fraction_evaluate=0.0), GOLOMB_QSGD, downlink="versions")

    a, b = _resumed_matches_uninterrupted(tmp_path, make, rounds=(4, 3))
    assert a._version == b._version == 6 and a._versions.keys() == b._versions.keys()
    np.testing.assert_array_equal(np.concatenate([x.ravel() for x in a.model_hat]),
                                  np.concatenate([x.ravel() for x in b.model_hat]))


def test_server_state_that_does_not_fit_is_refused_and_changes_nothing(task_identity,
                                                                        tmp_path):
    contexts = contexts_for([1, 2, 3])
    strategy = DeepReduceStrategy(fedavg(3), GOLOMB_QSGD, downlink="per_node")
    with pytest.raises(ValueError, match="after its first round"):
        strategy.save_state(str(tmp_path / "early.npz"))
    run_rounds(strategy, contexts, 2)
    path = tmp_path / "state.npz"
    strategy.save_state(str(path))
    good = path.read_bytes()

    def fresh(**kwargs):
        return DeepReduceStrategy(fedavg(3), kwargs.pop("params", GOLOMB_QSGD),
                                  **dict({"downlink": "per_node"}, **kwargs))

    for strategy_kwargs, match in (({"params": LOSSLESS}, "params="),
                                   ({"downlink": "versions"}, "downlink="),
                                   ({"server_params": LOSSLESS}, "server_params=")):
        other = fresh(**strategy_kwargs)
        with pytest.raises(ValueError, match=match):
            other.load_state(str(path))
        assert other._names is None and other.rounds == []
    for name, data, match in (
            ("truncated", good[: len(good) // 2], "not a saved server state"),
            ("not_npz", b"hello", "not a saved server state"),
            ("empty", b"", "not a saved server state")):
        bad = tmp_path / f"{name}.npz"
        bad.write_bytes(data)
        other = fresh()
        with pytest.raises(ValueError, match=match):
            other.load_state(str(bad))
        assert other._names is None

    import io as _io
    with np.load(_io.BytesIO(good)) as files:
        saved = {k: files[k] for k in files.files}
    header = json.loads(saved["header"].tobytes())

    def rewrite(name, header=header, **arrays):
        out = dict(saved, **arrays)
        out["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
        p = tmp_path / f"{name}.npz"
        with open(p, "wb") as f:
            np.savez(f, **out)
        return str(p)

    cases = [
        (rewrite("format", dict(header, format_version=99)), "format 99"),
        (rewrite("shape", **{"model_hat/2": np.zeros((3, 3), np.float32)}), "tensor '2'"),
        (rewrite("dtype", **{"source/0": saved["source/0"].astype(np.float64)}), "float64"),
        (rewrite("node", dict(header, held=["x"])), "'held'"),
        (rewrite("missing", dict(header, names=NAMES + ["extra"])), "missing"),
        (rewrite("stray", **{"junk": np.zeros(3)}), "junk"),
        (rewrite("rejected", dict(header, rejected=["node 3 sent junk"])), "'rejected'"),
    ]
    for p, match in cases:
        other = fresh()
        with pytest.raises(ValueError, match=match):
            other.load_state(p)
        assert other._names is None and not other._held
    # The good file still loads; the node memory bound of the loading
    # strategy applies.
    dense = sum(int(np.prod(s)) * 4 for s in SHAPES)
    small = fresh(node_memory_bytes=dense)
    small.load_state(str(path))
    assert len(small._held) == 1 and list(small._held) == list(strategy._held)[-1:]


def test_clients_round_with_noise_of_their_own(task_identity):
    """A Flower client runs each message in a fresh process, so its codec
    starts anew every time: the step number that seeds QSGD's rounding comes
    from the node and the model version, not from the codec's counter.
    Two nodes sending the same update in the same round send different
    payloads (a mean of same-noise roundings would keep the noise); the same
    node and version reproduce theirs."""
    ternary = dict(GOLOMB_QSGD, bits=1, compress_ratio=0.3)
    update = arrays(3, 0.2)
    first, second = (ModelCodec(ternary, NAMES, SHAPES, ["float32"] * len(SHAPES))
                     for _ in range(2))
    # Without a step, two fresh codecs round alike: the noise every client
    # would share.
    assert first.encode(update)[0] == second.encode(update)[0]
    a = first.encode(update, step=flower._message_step(1, 4))
    b = second.encode(update, step=flower._message_step(2, 4))
    again = second.encode(update, step=flower._message_step(1, 4))
    assert a[0] != b[0] and a[0] == again[0]
    for d in (a[1], b[1]):  # both decode to ternary values per bucket
        for u, x in zip(update, d):
            if u.size >= 1024:
                assert len(np.unique(np.abs(x[x != 0]))) <= math.ceil(0.3 * u.size / 512) + 1
    with pytest.raises(ValueError, match="step must be"):
        first.encode(update, step=0)

    # Through the strategy and the mod: every client trains to the same model.
    contexts = contexts_for([1, 2])
    strategy = DeepReduceStrategy(fedavg(2), ternary, downlink="versions")
    same = arrays(9, 0.5)
    payloads = []

    def train(msg, context):
        flower._CLIENT_CODECS._cache.clear()  # as a fresh process
        return Message(RecordDict({"arrays": ArrayRecord([a.copy() for a in same]),
                                   "metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)

    def spy(msg, context, call_next):
        reply = deepreduce_mod(msg, context, call_next)
        payloads.append(reply.content["arrays"]["payload"].data)
        return reply

    run_rounds(strategy, contexts, 2, client_mods={1: spy, 2: spy}, train=train)
    assert len(payloads) == 4 and payloads[0] != payloads[1] and payloads[2] != payloads[3]


def _one_round_matches_numpy(params, reference, up_ratio):
    """Runs one round of two clients with per-node downlink from the initial
    model (nothing sent down) and checks it against numpy: each client keeps
    update - reference(update, node, version) as its residual, and the model
    FedAvg gets is x0 + the weighted mean of the references."""
    contexts = contexts_for([1, 2])
    initial = arrays(0, 0.1)
    mod = flower.DeepReduceMod(initial_model=lambda: [a.copy() for a in initial])
    versions = {}

    def spy(msg, context, call_next):
        versions[context.node_id] = msg.content[flower.CONFIG_KEY]["version"]
        return mod(msg, context, call_next)

    strategy = DeepReduceStrategy(fedavg(2), params, downlink="per_node", initial_on_clients=True)
    log = []
    model, _ = run_rounds(strategy, contexts, 1, client_mods={1: spy, 2: spy}, log=log,
                          model=ArrayRecord([a.copy() for a in initial]))
    assert [e["crc"] for e in log] == [model_crc(initial)] * 2  # they trained from x0
    weights = {1: 11.0, 2: 12.0}
    expect = [np.zeros(s, np.float64) for s in SHAPES]
    for e in log:
        d = reference(e["delta"], e["node"], versions[e["node"]])
        residual = contexts[e["node"]].state[flower._STATE_RESIDUAL].to_numpy_ndarrays()
        for r, u, di in zip(residual, e["delta"], d):
            np.testing.assert_allclose(r, u - di, rtol=0, atol=1e-6)
        for i in range(len(SHAPES)):
            expect[i] += weights[e["node"]] / 23.0 * (initial[i] + d[i])
    for got, want in zip(model.to_numpy_ndarrays(), expect):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert strategy.totals()["up_ratio"] < up_ratio


def _sparse_reference(update, ratio, decode, whole_model=False, min_size=100):
    """Tensors under min_size dense; the others' top-k positions (per
    tensor, or one top-k over their concatenation with whole_model), whose
    values, tensor after tensor in ascending positions, are one value
    section: decode(values) gives what the receivers get."""
    import sparsify_reference as sref

    out = [u.copy() for u in update]
    sparse = [i for i, u in enumerate(update) if u.size >= min_size]
    flat = np.concatenate([update[i].reshape(-1) for i in sparse])
    offsets = np.cumsum([0] + [update[i].size for i in sparse])
    if whole_model:
        picks = sref.top_k(flat, math.ceil(ratio * flat.size))[0]
    else:
        picks = np.concatenate([o + sref.top_k(flat[o:e], math.ceil(ratio * (e - o)))[0]
                                for o, e in zip(offsets[:-1], offsets[1:])])
    sent = np.zeros(flat.size, np.float32)
    sent[picks] = decode(flat[picks])
    for i, o, e in zip(sparse, offsets[:-1], offsets[1:]):
        out[i] = sent[o:e].reshape(update[i].shape)
    return out


def test_one_round_of_nearest_qsgd_both_ways_matches_numpy(task_identity):
    """top-k per tensor, golomb positions and 2-bit QSGD rounded to nearest
    both ways (`golomb_qsgd2n_r22`'s family): 3 levels, buckets of 64."""
    import value_reference as vref

    params = {"compressor": "topk", "compress_ratio": 0.3, "deepreduce": "both",
              "index": "golomb", "value": "qsgd", "bits": 2, "qsgd_rounding": "nearest",
              "bucket_size": 64, "min_size": 100}

    def reference(update, node, version):
        return _sparse_reference(update, 0.3, lambda v: vref.qsgd_decode_reference(
            vref.qsgd_encode_reference(v, 3, 64, seed=0, rounding="nearest")))

    _one_round_matches_numpy(params, reference, 0.2)


def test_one_round_of_sparse_ternary_both_ways_matches_numpy(task_identity):
    """STC both ways (top-k per tensor, golomb positions, ternary values in
    buckets of 64)."""
    import value_reference as vref

    stc = {"compressor": "topk", "compress_ratio": 0.4, "deepreduce": "both",
           "index": "golomb", "value": "ternary", "bucket_size": 64, "min_size": 100}

    def reference(update, node, version):
        return _sparse_reference(update, 0.4, lambda v: vref.ternary_decode_reference(
            vref.ternary_encode_reference(v, 64), v.size, 64))

    _one_round_matches_numpy(stc, reference, 0.1)


def test_one_round_of_whole_model_topk_and_stochastic_qsgd_matches_numpy(task_identity):
    """The recommended configuration's family (`golomb_qsgd2_r28_bucket`):
    ONE top-k over the whole model's sparse tensors (topk_scope='bucket'),
    golomb positions, 2-bit QSGD with stochastic rounding, whose seed is the
    message's step number (node and model version) plus the bucket's key
    seed: each client rounds with noise of its own, reproduced here."""
    import value_reference as vref

    from deepreduce_tf import compressor

    params = {"compressor": "topk", "compress_ratio": 0.3, "deepreduce": "both",
              "index": "golomb", "value": "qsgd", "bits": 2, "topk_scope": "bucket",
              "bucket_size": 64, "min_size": 100}
    codec = ModelCodec(params, NAMES, SHAPES, ["float32"] * len(SHAPES))
    codec.encode(arrays(5, 0.1), step=1)
    (key,) = codec.step_counters()  # the one fused bucket's
    seeds = {}

    def reference(update, node, version):
        seed = flower._message_step(node, version) + (compressor._key_seed(key, 0) << 20)
        seeds[node] = seed
        return _sparse_reference(update, 0.3, lambda v: vref.qsgd_decode_reference(
            vref.qsgd_encode_reference(v, 3, 64, seed=seed)), whole_model=True)

    _one_round_matches_numpy(params, reference, 0.2)
    assert seeds[1] != seeds[2]
    # Whole-model selection differs from per tensor on these updates (the
    # tensors' scales differ), so the test tells them apart.
    update = [t - w for t, w in zip(target(1), arrays(0, 0.1))]
    whole = _sparse_reference(update, 0.3, lambda v: v, whole_model=True)
    per_tensor = _sparse_reference(update, 0.3, lambda v: v)
    assert any((a != 0).sum() != (b != 0).sum() for a, b in zip(whole, per_tensor))


# ---------------------------------------------------------------------------
# The two documented lines: defaults, and what Flower's log shows

def test_the_defaults_are_the_recommended_configuration_per_node(task_identity):
    """DeepReduceStrategy(strategy) alone: the recommended configuration
    (whole-model top-28 %, golomb, 2-bit QSGD, min_size 100) both ways and the
    per-node downlink: a node's first message is the model (nothing says the
    node can build it), every later one a payload."""
    import logging

    from deepreduce_tf.federated.codec import canonical_params

    strategy = DeepReduceStrategy(fedavg(2))
    assert strategy.params_json == canonical_params(flower.RECOMMENDED)
    assert strategy.server_params_json == strategy.params_json
    assert strategy.downlink == "per_node" and not strategy.initial_on_clients
    shapes = [(3, 3, 1, 16), (16,), (400, 60), (60,), (60, 10), (10,)]
    model = ArrayRecord([np.full(s, 0.01, np.float32) for s in shapes])
    dense = sum(4 * int(np.prod(s)) for s in shapes)
    lines = []

    class Lines(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Lines()
    logging.getLogger("flwr").addHandler(handler)
    try:
        strategy.summary()
        contexts = contexts_for([1, 2])
        for rnd in (1, 2):
            model, measured = run_rounds(strategy, contexts, 1, first=rnd, model=model)
            strategy.aggregate_evaluate(rnd, [])
    finally:
        logging.getLogger("flwr").removeHandler(handler)
    first, second = strategy.rounds
    assert first["down_bytes"] == 2 * dense  # first contact: the model itself
    assert 0 < second["down_bytes"] < 0.2 * 2 * dense  # then one payload per node
    assert any("DeepReduce: uplink" in l and '"compress_ratio": 0.28' in l for l in lines)
    assert any("DeepReduce: downlink per_node" in l for l in lines)
    for row in (first, second):
        want = (f"DeepReduce: round {row['round']}: sent {row['down_bytes']:,} B in 2 messages "
                f"({row['down_bytes'] / (2 * dense):.3f} of FedAvg's), received "
                f"{row['up_bytes']:,} B in 2 messages ({row['up_bytes'] / (2 * dense):.3f} of "
                "FedAvg's)")
        assert sum(want in l for l in lines) == 1, (want, lines)
    total = strategy.totals()["total_ratio"]
    assert f"all rounds: {total:.3f} of FedAvg's bytes both ways, 0 updates rejected" in lines[-1]
