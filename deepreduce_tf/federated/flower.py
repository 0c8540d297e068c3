"""DeepReduce compression for Flower: one change on each side.

Server (ServerApp):

    strategy = DeepReduceStrategy(FedAvg(fraction_train=0.1))   # RECOMMENDED, per node
    result = strategy.start(grid, initial_arrays=ArrayRecord(model.get_weights()), ...)

Client (ClientApp): ClientApp(mods=[deepreduce_mod]); the train/evaluate
functions are unchanged (they get and return the model's dense arrays). With
DeepReduceStrategy(..., initial_on_clients=True) and
ClientApp(mods=[DeepReduceMod(initial_model=...)]) (keras_initial_weights:
the same initial Keras model on both sides) no message is the dense model.

The protocol (docs/federated.md):

* Downlink, 'versions'. The server keeps x^, the model every client can rebuild. When
  the model to send, x, changed, it compresses x - x^ (server_params) into a
  *version* v and sets x^ <- x^ + D(payload): the difference still unsent
  stays in x - x^, the server's error feedback. A sampled node that holds
  version b gets the payloads b+1..v (a chain), or the dense x^ when it
  holds none or the chain would be larger. Each message carries the
  version, the CRC of x^ and both configurations; the client rebuilds x^,
  checks the CRC and keeps x^ and v in its node state (context.state), which
  Flower keeps across rounds.
  With downlink='per_node' (the default) the server instead keeps, per node, the model
  that node holds, and sends each sampled node one payload: the compressed
  difference between the model and what that node holds (the node's own
  error feedback); with initial_on_clients=True a node never seen before is
  taken to hold the initial model (DeepReduceMod(initial_model=...) builds
  it on the client), so no node needs the dense model.
* Uplink. The client trains from x^ and sends the compressed
  update Delta = w_local - x^ plus its residual (params; the residual also
  lives in the node state). The server decodes it, refusing a payload that is
  oversized, malformed, made for another model or configuration, non-finite,
  or relative to another version (logged, listed in `rejected`, left out of
  the round), and hands the wrapped strategy x + D(payload) as that client's
  model: FedAvg then averages exactly as without compression.

Every message's bytes are counted per round and direction (`rounds`,
`totals()`), next to what FedAvg would send (the model's dense bytes per
message). Payloads travel as Flower Array data of stype 'deepreduce'.
"""
import collections
import json
import logging

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.common.logger import log as flower_log
from flwr.serverapp.strategy import Strategy

from deepreduce_tf.federated import server_state
from deepreduce_tf.federated.codec import (ModelCodec, PayloadError, canonical_params,
                                           model_crc)
from deepreduce_tf.federated.rowwise import RowwiseMean  # noqa: F401 (its old home)

logger = logging.getLogger("deepreduce_tf.federated")

STYPE = "deepreduce"
CONFIG_KEY = "deepreduce"
STATE_KEY = "deepreduce"
PAYLOAD_KEY = "payload"
PROTOCOL = 2
# Message bases: the dense model; one payload over the model the node holds
# (whose CRC travels as base_crc); >= 0: a chain from that version.
BASE_DENSE, BASE_NODE = -1, -2
DOWNLINKS = ("versions", "per_node")
# The configuration docs/federated.md recommends (its headline: Fashion-MNIST,
# 100 non-IID clients, 10 per round, 200 rounds): one top-r of 28 % over the
# whole model, Golomb positions, 2-bit QSGD values, every tensor of 100
# elements or more compressed (the smallest volume confirmed on fresh seeds:
# 0.056 of FedAvg's). DeepReduceStrategy's default params.
RECOMMENDED = {"compressor": "topk", "compress_ratio": 0.28, "topk_scope": "bucket",
               "deepreduce": "both", "index": "golomb", "value": "qsgd", "bits": 2,
               "min_size": 100}
_STATE_MODEL, _STATE_RESIDUAL = "deepreduce.model", "deepreduce.residual"


def _payload_array(payload):
    return Array(dtype="uint8", shape=(len(payload),), stype=STYPE, data=bytes(payload))


def _record_bytes(record):
    return sum(len(a.data) for a in record.values())


def _arrays(record):
    """An ArrayRecord of numpy arrays -> (names, arrays)."""
    names = list(record.keys())
    return names, [record[n].numpy() for n in names]


def _dense_record(names, arrays):
    return ArrayRecord({n: Array(a) for n, a in zip(names, arrays)})


def _without(content, key):
    """A new RecordDict: content without `key`."""
    return RecordDict({k: v for k, v in content.items() if k != key})


class _Codecs:
    """ModelCodecs per (configuration, model), shared by the messages of a
    process (a client's codec outlives the ClientApp object)."""

    def __init__(self, size=8):
        self._cache, self._size = {}, size

    def get(self, params_json, names, arrays):
        key = (params_json, tuple(names), tuple((a.shape, a.dtype.str) for a in arrays))
        codec = self._cache.pop(key, None)
        if codec is None:
            codec = ModelCodec.for_arrays(json.loads(params_json), names, arrays)
        self._cache[key] = codec
        while len(self._cache) > self._size:
            self._cache.pop(next(iter(self._cache)))
        return codec


_CLIENT_CODECS = _Codecs()


class DeepReduceStrategy(Strategy):
    """Wraps a Flower strategy (FedAvg, FedProx, FedAdam, ...): compresses
    what it sends to clients and decodes what they send back.

    Args:
      strategy: the wrapped flwr.serverapp.strategy.Strategy; it samples,
        aggregates and evaluates as without compression.
      params: the clients' from_params configuration (uplink) [RECOMMENDED].
        'memory': 'residual' (default) keeps each client's residual, 'none'
        does not.
      server_params: the server's configuration (downlink) [params]; None
        with downlink=False sends the model dense.
      downlink: how the server's messages are compressed:
        'per_node' (the default): one payload per message, C(x - the model
          the node holds); what is not sent stays in that difference
          (per-node error feedback). The server keeps each node's model (at
          most node_memory_bytes; an evicted node gets the dense model next).
        'versions' (or True): one version per model change, shared by every
          node; a node gets the versions it missed (a chain) or the dense
          model where that is smaller (a chain grows with the rounds a node
          missed: partial participation costs downlink bytes).
        False: the dense model.
      initial_on_clients: with 'per_node', a node never seen before holds the
        initial model (the first one the wrapped strategy sends; the client
        builds it: DeepReduceMod(initial_model=...)), so it gets a payload,
        not the dense model. A node that cannot build it answers with an error
        and gets the dense model next time.
      node_memory_bytes: the bound of the per-node models [1 GiB].
    """

    def __init__(self, strategy, params=None, server_params=None, downlink="per_node",
                 initial_on_clients=False, node_memory_bytes=2 ** 30):
        if not isinstance(strategy, Strategy):
            raise TypeError("DeepReduceStrategy wraps a flwr.serverapp.strategy.Strategy, got "
                            f"{type(strategy).__name__}")
        if downlink is True:
            downlink = "versions"
        if downlink is not False and downlink not in DOWNLINKS:
            raise ValueError(f"downlink must be one of {DOWNLINKS} (True: 'versions') or False "
                             f"(dense), got {downlink!r}")
        if initial_on_clients and downlink != "per_node":
            raise ValueError("initial_on_clients=True needs downlink='per_node' (a payload over "
                             "the initial model per node)")
        if (isinstance(node_memory_bytes, bool) or not isinstance(node_memory_bytes, int)
                or node_memory_bytes < 0):
            raise ValueError(f"node_memory_bytes must be an int >= 0, got {node_memory_bytes!r}")
        self.strategy = strategy
        self.downlink = downlink
        self.initial_on_clients = bool(initial_on_clients)
        self.node_memory_bytes = node_memory_bytes
        if params is None:
            params = RECOMMENDED
        self.params_json = canonical_params(params)
        self.server_params_json = (canonical_params(server_params if server_params is not None
                                                    else params) if downlink else None)
        ModelCodec.check_params(json.loads(self.params_json))
        if self.server_params_json:
            ModelCodec.check_params(json.loads(self.server_params_json))
        self.arrays_key = getattr(strategy, "arrayrecord_key", "arrays")
        self.rounds = []      # one dict per round: bytes per direction
        self.rejected = []    # (round, node id, reason)
        self._names = None
        self._model_hat = None   # x^: what every client can rebuild
        self._model_hat_crc = None  # its CRC, computed once per version
        self._source = None      # x when x^ was last updated
        self._versions = {}      # version -> payload bytes (the chain still kept)
        self._version = 0
        self._synced = {}        # node id -> the version it holds
        self._held = collections.OrderedDict()  # 'per_node': node id -> the model it holds
        self._held_bytes = 0
        self._seen = set()       # nodes sent a message (they no longer hold the initial model)
        self._initial = None     # the first model: what initial_on_clients nodes hold
        self._server_codec = self._client_codec = None
        self._cast_logged = False

    # ------------------------------------------------------------ downlink
    def _row(self, server_round):
        if not self.rounds or self.rounds[-1]["round"] != server_round:
            self.rounds.append({"round": server_round, "down_messages": 0, "down_bytes": 0,
                                "up_messages": 0, "up_bytes": 0, "rejected": 0,
                                "versions": 0, "version_bytes": 0,
                                "dense_bytes": self._codec_dense()})
        return self.rounds[-1]

    def _codec_dense(self):
        return self._client_codec.dense_bytes if self._client_codec else 0

    def _broadcast(self, arrays, server_round):
        """Makes a new version if the model to send changed."""
        names, x = _arrays(arrays)
        if self._names is None:
            self._names = names
            self._client_codec = ModelCodec.for_arrays(json.loads(self.params_json), names, x)
            if self.server_params_json:
                self._server_codec = ModelCodec.for_arrays(
                    json.loads(self.server_params_json), names, x)
            self._model_hat = [a.copy() for a in x]
            self._model_hat_crc = model_crc(self._model_hat)
            self._source = [a.copy() for a in x]
            self._initial = self._source
            return
        if names != self._names:
            raise ValueError(f"the model's arrays changed names: {self._names} -> {names}")
        x = self._model_dtypes(x)
        self._client_codec.check_arrays(x, "the strategy's model")
        if all(np.array_equal(a, b) for a, b in zip(x, self._source)):
            return
        self._source = [a.copy() for a in x]
        self._version += 1
        if self._server_codec is None or self.downlink == "per_node":
            self._model_hat = [a.copy() for a in x]
            self._model_hat_crc = model_crc(self._model_hat)
            return
        payload, decoded, _ = self._server_codec.encode(
            [a - b for a, b in zip(x, self._model_hat)])
        self._model_hat = [a + d for a, d in zip(self._model_hat, decoded)]
        self._model_hat_crc = model_crc(self._model_hat)
        self._versions[self._version] = payload
        row = self._row(server_round)
        row["versions"] += 1
        row["version_bytes"] += len(payload)
        # Keep only the versions a chain cheaper than the dense model can use.
        total, dense = 0, self._client_codec.dense_bytes
        for v in sorted(self._versions, reverse=True):
            total += len(self._versions[v])
            if total > dense:
                for old in [u for u in self._versions if u <= v]:
                    del self._versions[old]
                break

    def _model_dtypes(self, x):
        """The strategy's model in the model's own float dtypes. Server
        optimizers compute in float64 (Flower's FedAdam, FedYogi, FedAdagrad
        return float64 arrays from a float32 model); the clients hold and
        train the model's dtype, which is what a Flower client's model casts
        a float64 array to, so a floating array of the right shape and
        another float dtype is cast (once logged). Any other mismatch is left
        to check_arrays' error."""
        out = []
        for name, a, dtype in zip(self._names, x, self._client_codec.dtypes):
            want = dtype.as_numpy_dtype
            if (a.dtype != want and np.issubdtype(a.dtype, np.floating)
                    and np.issubdtype(want, np.floating)):
                if not self._cast_logged:
                    self._cast_logged = True
                    logger.info("the wrapped strategy's model is %s (tensor %r); sent as the "
                                "model's %s, what the clients hold", a.dtype, name,
                                np.dtype(want).name)
                a = a.astype(want)
            out.append(a)
        return out

    def _per_node(self, node):
        """'per_node': (record, base, base_crc, crc, bytes) of the message to
        `node`; notes the model the node will hold."""
        x = self._source
        base_model = self._held.pop(node, None)
        if base_model is not None:
            self._held_bytes -= self._client_codec.dense_bytes
        elif self.initial_on_clients and node not in self._seen:
            base_model = self._initial
        self._seen.add(node)
        if base_model is None:
            held = [a.copy() for a in x]
            record = _dense_record(self._names, held)
            base, base_crc, nbytes = BASE_DENSE, 0, self._client_codec.dense_bytes
        else:
            payload, decoded, _ = self._server_codec.encode(
                [a - b for a, b in zip(x, base_model)])
            held = [b + d for b, d in zip(base_model, decoded)]
            record = ArrayRecord({f"{PAYLOAD_KEY}.0": _payload_array(payload)})
            base, base_crc, nbytes = BASE_NODE, model_crc(base_model), len(payload)
        # Least recently sent first out: an evicted node gets the dense model.
        self._held[node] = held
        self._held_bytes += self._client_codec.dense_bytes
        while self._held and self._held_bytes > self.node_memory_bytes:
            self._held.popitem(last=False)
            self._held_bytes -= self._client_codec.dense_bytes
        return record, base, base_crc, model_crc(held), nbytes

    def _forget(self, node):
        """The node's model is unknown (an error, another version): it gets
        the dense model next time."""
        self._synced.pop(node, None)
        if self._held.pop(node, None) is not None:
            self._held_bytes -= self._client_codec.dense_bytes
        self._seen.add(node)

    def node_model(self, node):
        """'per_node': the model the server takes `node` to hold (numpy
        arrays), or None."""
        return self._held.get(node)

    def _message_for(self, msg, server_round):
        """msg (from the wrapped strategy) with the compressed model."""
        node = msg.metadata.dst_node_id
        if self.downlink == "per_node":
            return self._finish(msg, server_round, *self._per_node(node))
        held = self._synced.get(node)
        chain = None
        if (self._server_codec is not None and held is not None and held < self._version
                and all(v in self._versions for v in range(held + 1, self._version + 1))):
            chain = [self._versions[v] for v in range(held + 1, self._version + 1)]
        elif self._server_codec is not None and held == self._version:
            chain = []
        if chain is not None:
            record = ArrayRecord({f"{PAYLOAD_KEY}.{i}": _payload_array(p)
                                  for i, p in enumerate(chain)})
            base, nbytes = held, sum(len(p) for p in chain)
        else:
            record = _dense_record(self._names, self._model_hat)
            base, nbytes = BASE_DENSE, self._client_codec.dense_bytes
        return self._finish(msg, server_round, record, base, 0, self._model_hat_crc, nbytes)

    def _finish(self, msg, server_round, record, base, base_crc, crc, nbytes):
        content = _without(msg.content, self.arrays_key)
        content[self.arrays_key] = record
        content[CONFIG_KEY] = ConfigRecord({
            "protocol": PROTOCOL, "version": self._version, "base": base,
            "base_crc": base_crc, "crc": crc, "arrays_key": self.arrays_key,
            "names": json.dumps(self._names), "params": self.params_json,
            "server_params": self.server_params_json or ""})
        msg.content = content
        row = self._row(server_round)
        row["down_messages"] += 1
        row["down_bytes"] += nbytes
        return msg

    def _configure(self, messages, arrays, server_round):
        self._broadcast(arrays, server_round)
        return [self._message_for(m, server_round) for m in messages]

    def configure_train(self, server_round, arrays, config, grid):
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        return self._configure(messages, arrays, server_round)

    def configure_evaluate(self, server_round, arrays, config, grid):
        messages = list(self.strategy.configure_evaluate(server_round, arrays, config, grid))
        return self._configure(messages, arrays, server_round)

    # -------------------------------------------------------------- uplink
    def _note_version(self, msg):
        cfg = msg.content.config_records.get(CONFIG_KEY)
        node = msg.metadata.src_node_id
        version = cfg.get("version") if cfg is not None else None
        if isinstance(version, int) and 0 <= version <= self._version:
            if self.downlink != "per_node":
                self._synced[node] = version
            elif version != self._version:
                self._forget(node)
        else:
            self._forget(node)

    def _reject(self, server_round, node, reason):
        logger.warning("round %s: rejected the update of node %s: %s", server_round, node,
                       reason)
        self.rejected.append((server_round, node, reason))
        self._row(server_round)["rejected"] += 1

    def _decode_reply(self, msg):
        """A train reply -> the client's model (x + D(payload)); raises
        PayloadError."""
        content = msg.content
        cfg = content.config_records.get(CONFIG_KEY)
        if cfg is None:
            raise PayloadError("the reply carries no deepreduce record: is the client's "
                               "ClientApp built with mods=[deepreduce_mod]?")
        if cfg.get("version") != self._version:
            raise PayloadError(f"the update is relative to model version {cfg.get('version')!r}"
                               f", this round's is {self._version}")
        records = content.array_records
        if list(records.keys()) != [self.arrays_key]:
            raise PayloadError(f"expected one ArrayRecord {self.arrays_key!r}, got "
                               f"{list(records.keys())}")
        record = records[self.arrays_key]
        if list(record.keys()) != [PAYLOAD_KEY]:
            raise PayloadError(f"expected one array {PAYLOAD_KEY!r}, got {list(record.keys())}")
        array = record[PAYLOAD_KEY]
        if array.stype != STYPE or array.dtype != "uint8":
            raise PayloadError(f"the payload array has stype {array.stype!r} and dtype "
                               f"{array.dtype!r}, expected {STYPE!r} and 'uint8'")
        delta = self._client_codec.decode(array.data)
        return len(array.data), [x + d for x, d in zip(self._source, delta)]

    def aggregate_train(self, server_round, replies):
        kept = []
        row = self._row(server_round)
        for msg in replies:
            if msg.has_error():
                self._forget(msg.metadata.src_node_id)
                kept.append(msg)
                continue
            node = msg.metadata.src_node_id
            self._note_version(msg)
            try:
                nbytes, model = self._decode_reply(msg)
            except PayloadError as e:
                self._reject(server_round, node, str(e))
                continue
            row["up_messages"] += 1
            row["up_bytes"] += nbytes
            content = _without(_without(msg.content, CONFIG_KEY), self.arrays_key)
            content[self.arrays_key] = _dense_record(self._names, model)
            msg.content = content
            kept.append(msg)
        return self.strategy.aggregate_train(server_round, kept)

    def aggregate_evaluate(self, server_round, replies):
        kept = []
        for msg in replies:
            if msg.has_error():
                self._forget(msg.metadata.src_node_id)
            else:
                self._note_version(msg)
                msg.content = _without(msg.content, CONFIG_KEY)
            kept.append(msg)
        out = self.strategy.aggregate_evaluate(server_round, kept)
        # The round's messages are all counted now (start() calls this every
        # round, with or without evaluation replies): one line in Flower's log.
        flower_log(logging.INFO, "\t└──> DeepReduce: %s", self._round_line(server_round))
        return out

    def _round_line(self, server_round):
        row = next((r for r in self.rounds if r["round"] == server_round), None)
        if row is None:
            return "no message this round"
        dense, t = row["dense_bytes"], self.totals()

        def part(nbytes, messages, way):
            ratio = f" ({nbytes / (messages * dense):.3f} of FedAvg's)" if messages else ""
            return f"{way} {nbytes:,} B in {messages} messages{ratio}"

        total = f"{t['total_ratio']:.3f}" if t["total_ratio"] is not None else "-"
        return (f"round {server_round}: {part(row['down_bytes'], row['down_messages'], 'sent')}, "
                f"{part(row['up_bytes'], row['up_messages'], 'received')}; all rounds: "
                f"{total} of FedAvg's bytes both ways, {t['rejected']} updates rejected")

    def summary(self):
        self.strategy.summary()
        flower_log(logging.INFO, "\t├──> DeepReduce: uplink %s", self.params_json)
        flower_log(logging.INFO, "\t└──> DeepReduce: downlink %s %s%s",
                   self.downlink or "dense", self.server_params_json or "",
                   ", initial model on the clients" if self.initial_on_clients else "")

    def start(self, grid, initial_arrays, num_rounds=3, *args, **kwargs):
        """The wrapped strategy's rounds (Flower's Strategy.start), then one
        line in Flower's log: the bytes of every round each way, against
        FedAvg's (totals())."""
        result = super().start(grid, initial_arrays, num_rounds, *args, **kwargs)
        t = self.totals()
        if t["fedavg_down_bytes"] + t["fedavg_up_bytes"]:
            flower_log(logging.INFO, "DeepReduce, %d rounds: sent %s B (%.3f of FedAvg's), "
                       "received %s B (%.3f of FedAvg's), both ways %.3f of FedAvg's; "
                       "%d updates rejected", num_rounds, f"{t['down_bytes']:,}",
                       t["down_ratio"] or 0.0, f"{t['up_bytes']:,}", t["up_ratio"] or 0.0,
                       t["total_ratio"], t["rejected"])
        return result

    # ---------------------------------------------------------- accounting
    def totals(self):
        """Bytes per direction over all rounds, and FedAvg's for the same
        messages (the dense model each way)."""
        down = sum(r["down_bytes"] for r in self.rounds)
        up = sum(r["up_bytes"] for r in self.rounds)
        dense = self._codec_dense()
        fed_down = dense * sum(r["down_messages"] for r in self.rounds)
        fed_up = dense * sum(r["up_messages"] for r in self.rounds)
        versions = sum(r["versions"] for r in self.rounds)
        version_bytes = sum(r["version_bytes"] for r in self.rounds)
        return {"down_bytes": down, "up_bytes": up, "fedavg_down_bytes": fed_down,
                "fedavg_up_bytes": fed_up, "versions": versions,
                "version_ratio": version_bytes / (versions * dense) if versions else None,
                "down_ratio": down / fed_down if fed_down else None,
                "up_ratio": up / fed_up if fed_up else None,
                "total_ratio": (down + up) / (fed_down + fed_up) if fed_down + fed_up else None,
                "rejected": len(self.rejected)}

    # --------------------------------------------------------- persistence
    def save_state(self, path):
        """Writes what this strategy keeps between rounds to `path` (an .npz
        file, replaced atomically): x^ and the versions, the model each node
        holds, the nodes seen, the byte accounting, and the wrapped
        strategy's own state where it saves one (FedAvgTopK's momentum and
        error; federated/server_state.py). Call it between rounds, e.g. from
        start()'s evaluate_fn after round 0. Flower's strategies' own state
        (FedAvgM's momentum) and the clients' residuals (node state) are
        not in it."""
        server_state.save(self, path)

    def load_state(self, path):
        """Restores the state save_state wrote into this strategy, built
        with the same configuration (params, server_params, downlink,
        initial_on_clients, and the same wrapped strategy where that saves
        state of its own); then start() goes on from it (pass the last
        global model as initial_arrays). Raises ValueError saying what
        differs; the strategy is unchanged then."""
        with open(path, "rb") as f:
            server_state.load(self, f.read(), what=repr(str(path)))

    @property
    def model_hat(self):
        """x^: the model the clients rebuild (numpy arrays)."""
        return self._model_hat


# ---------------------------------------------------------------- client
def _state_arrays(state, key):
    record = state.array_records.get(key) if key in state else None
    return None if record is None else _arrays(record)


def _decode_into(cfg, names, model, record, count):
    codec = _CLIENT_CODECS.get(cfg["server_params"], names, model)
    for i in range(count):
        array = record.get(f"{PAYLOAD_KEY}.{i}")
        if array is None or array.stype != STYPE:
            raise ValueError(f"payload {i} is missing or not of stype {STYPE!r}")
        delta = codec.decode(array.data)
        model = [a + d for a, d in zip(model, delta)]
    return model


def _rebuild(cfg, record, state, initial_model=None):
    """The model the server sent (dense, one payload over the model the node
    holds, or a chain over the node's version). Raises ValueError saying why
    not."""
    names = json.loads(cfg["names"])
    base = cfg["base"]
    if base == BASE_DENSE:
        got, model = _arrays(record)
        if got != names:
            raise ValueError(f"the dense model's arrays are {got}, the message names {names}")
        return names, model
    if base == BASE_NODE:
        stored = _state_arrays(state, _STATE_MODEL)
        held = stored[1] if stored is not None and stored[0] == names else None
        if held is None or model_crc(held) != cfg["base_crc"]:
            held = initial_model() if initial_model is not None else None
            if held is not None and model_crc(held) != cfg["base_crc"]:
                raise ValueError("the server sent changes from the initial model, but the one "
                                 "this client's initial_model() builds differs from the "
                                 "server's (CRC): the server sends the whole model next time")
        if held is None:
            raise ValueError("the server sent changes from a model this node does not hold (its "
                             "state was lost, or the server takes it to hold the initial model "
                             "and the mod has no initial_model): the server sends the whole "
                             "model next time")
        return names, _decode_into(cfg, names, held, record, 1)
    if base < 0:
        raise ValueError(f"unknown message base {base}: install the same deepreduce_tf version "
                         "on both sides")
    stored = _state_arrays(state, _STATE_MODEL)
    held = state.config_records[STATE_KEY]["version"] if STATE_KEY in state else None
    if stored is None or held != base:
        raise ValueError(f"the server sent the model as changes from version {base}, but this "
                         f"node holds {held!r}: its state was lost; the server sends the "
                         "whole model next time")
    return names, _decode_into(cfg, names, stored[1], record, len(record))


class DeepReduceMod:
    """Flower client mod: rebuilds the server's model from a DeepReduce
    message, runs the ClientApp's function on the dense model, and sends its
    trained model back as a compressed update with error feedback. Messages
    without a DeepReduce record pass through unchanged.

    ClientApp(mods=[deepreduce_mod]) (an instance without initial model), or
    ClientApp(mods=[DeepReduceMod(initial_model=fn)]) where fn() returns the
    model's initial arrays (numpy, in the server's order; e.g. the Keras
    model built with the same seed as the server's): then a server with
    downlink='per_node', initial_on_clients=True never sends this node the
    dense model (its CRC is checked; a different model is an error reply).
    """

    def __init__(self, initial_model=None):
        if initial_model is not None and not callable(initial_model):
            raise TypeError("initial_model must be a function returning the initial arrays, got "
                            f"{type(initial_model).__name__}")
        self._initial_fn, self._initial = initial_model, None

    def initial_model(self):
        if self._initial is None:
            arrays = self._initial_fn()
            if isinstance(arrays, ArrayRecord):
                arrays = arrays.to_numpy_ndarrays()
            self._initial = [np.asarray(a) for a in arrays]
        return [a.copy() for a in self._initial]

    def __call__(self, msg, context, call_next):
        return _mod(msg, context, call_next,
                    self.initial_model if self._initial_fn is not None else None)


def _message_step(node_id, version):
    """The step number of a client's encoding: unique per (node, model
    version), so that no two clients' stochastic rounding shares its noise
    (their mean would keep it) whatever process encodes."""
    return 1 + ((int(node_id) % (1 << 31)) << 24 | (int(version) % (1 << 24)))


def _mod(msg, context, call_next, initial_model):
    content = msg.content
    cfg = content.config_records.get(CONFIG_KEY) if msg.has_content() else None
    if cfg is None:
        return call_next(msg, context)
    if cfg.get("protocol") != PROTOCOL:
        raise ValueError(f"the server speaks DeepReduce federated protocol "
                         f"{cfg.get('protocol')!r}, this client {PROTOCOL}: install the same "
                         "deepreduce_tf version on both sides")
    key = cfg["arrays_key"]
    state = context.state
    names, model = _rebuild(cfg, content.array_records[key], state, initial_model)
    if model_crc(model) != cfg["crc"]:
        raise ValueError("the rebuilt model differs from the server's (CRC mismatch): "
                         "the node's state is out of date; the server sends the whole model "
                         "next time")
    state[_STATE_MODEL] = _dense_record(names, model)
    state[STATE_KEY] = ConfigRecord({"version": cfg["version"]})
    inner = _without(_without(content, CONFIG_KEY), key)
    inner[key] = _dense_record(names, model)
    msg.content = inner
    reply = call_next(msg, context)
    if reply.has_error():
        return reply
    out = reply.content
    if msg.metadata.message_type.split(".")[0] == "train" and key in out.array_records:
        got, local = _arrays(out.array_records[key])
        if got != names:
            raise ValueError(f"the ClientApp returned arrays {got}, the server sent {names}")
        codec = _CLIENT_CODECS.get(cfg["params"], names, model)
        codec.check_arrays(local, "the trained model")
        residual = _state_arrays(state, _STATE_RESIDUAL)
        residual = residual[1] if residual is not None and residual[0] == names else None
        payload, _, residual = codec.encode([w - m for w, m in zip(local, model)], residual,
                                            step=_message_step(context.node_id, cfg["version"]))
        if residual is not None:
            state[_STATE_RESIDUAL] = _dense_record(names, residual)
        out = _without(out, key)
        out[key] = ArrayRecord({PAYLOAD_KEY: _payload_array(payload)})
    out[CONFIG_KEY] = ConfigRecord({"version": cfg["version"]})
    reply.content = out
    return reply


deepreduce_mod = DeepReduceMod()
