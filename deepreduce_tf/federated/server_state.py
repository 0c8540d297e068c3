"""What a DeepReduceStrategy keeps between rounds, saved to one file and
restored into a new strategy, so that a restarted ServerApp goes on where
the last one stopped (DeepReduceStrategy.save_state / load_state).

The state is the server's side of the error feedback and of the protocol:
x^ and the versions not yet sent to every node ('versions'), the model each
node holds ('per_node'; least recently sent first), which nodes were seen,
the version counter, the downlink encoder's step counters (the seeds of its
stochastic rounding), and the byte accounting of every round so far; and
the wrapped strategy's own state where it defines two methods:
server_state() -> (settings, arrays), a JSON-able dict of the settings its
state is only valid under and {name: numpy array}; and
load_server_state(settings, arrays, model), which checks them (against its
own settings and `model`, the model's numpy arrays) and installs them, or
raises ValueError saying what differs and changes nothing. FedAvgTopK
does (its momentum and error); Flower's own strategies do not (FedAvgM's
momentum, FedAdam's moments start again after a restart). The clients'
residuals are not part of it: they live in each node's state on the
SuperNode.

The file is a numpy .npz without pickled objects: one JSON header (the
configuration, node ids, counters, accounting) and the arrays. Loading
checks the header against the strategy it is loaded into and every array
against the model's names, shapes and dtypes; a file that does not match
raises ValueError saying what differs, and the strategy is left as it was.
"""
import io
import json
import os
import tempfile
import zipfile

import numpy as np

FORMAT = "deepreduce_tf.federated.server_state"
FORMAT_VERSION = 1
_HEADER = "header"
_INNER = "strategy/"  # the arrays of the wrapped strategy's own state


def _inner_hooks(strategy):
    """The wrapped strategy if it saves state of its own, else None."""
    inner = strategy.strategy
    return inner if callable(getattr(inner, "server_state", None)) and callable(
        getattr(inner, "load_server_state", None)) else None


def _configuration(strategy):
    return {"params": strategy.params_json, "server_params": strategy.server_params_json,
            "downlink": strategy.downlink, "initial_on_clients": strategy.initial_on_clients}


def to_bytes(strategy):
    """The strategy's state as the bytes of an .npz file."""
    if strategy._names is None:
        raise ValueError("the strategy has no state yet: save it after its first round")
    arrays = {}

    def put(prefix, model):
        for i, a in enumerate(model):
            arrays[f"{prefix}/{i}"] = np.asarray(a)

    put("model_hat", strategy._model_hat)
    put("source", strategy._source)
    put("initial", strategy._initial)
    held = list(strategy._held.items())  # least recently sent first
    for k, (_, model) in enumerate(held):
        put(f"held/{k}", model)
    versions = sorted(strategy._versions)
    for v in versions:
        arrays[f"version/{v}"] = np.frombuffer(strategy._versions[v], np.uint8)
    header = dict(
        _configuration(strategy), format=FORMAT, format_version=FORMAT_VERSION,
        names=strategy._names, version=strategy._version, versions=versions,
        held=[int(n) for n, _ in held],
        synced=[[int(n), int(v)] for n, v in strategy._synced.items()],
        seen=sorted(int(n) for n in strategy._seen),
        steps=(strategy._server_codec.step_counters()
               if strategy._server_codec is not None else {}),
        rounds=strategy.rounds, rejected=[list(r) for r in strategy.rejected])
    inner = _inner_hooks(strategy)
    if inner is not None:
        settings, own = inner.server_state()
        header["strategy"] = {"class": type(inner).__name__, "settings": settings,
                              "arrays": sorted(own)}
        for name, a in own.items():
            arrays[_INNER + name] = np.asarray(a)
    else:
        header["strategy"] = None
    arrays[_HEADER] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def save(strategy, path):
    """Writes the state to `path` atomically: a crash while saving leaves the
    previous file whole."""
    data = to_bytes(strategy)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".server_state.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _int_list(header, key, what):
    value = header.get(key)
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{what}: '{key}' is not a list of integers")
    return value


def _read(data, what):
    try:
        files = np.load(io.BytesIO(data), allow_pickle=False)
        arrays = {k: files[k] for k in files.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{what} is not a saved server state (an .npz file): {e}") from None
    if _HEADER not in arrays or arrays[_HEADER].dtype != np.uint8:
        raise ValueError(f"{what} has no server-state header: not written by save_state")
    try:
        header = json.loads(arrays.pop(_HEADER).tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what}: the header is not JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{what} is not a saved DeepReduceStrategy state")
    if header.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{what} has state format {header.get('format_version')!r}; this "
                         f"deepreduce_tf reads format {FORMAT_VERSION}: load it with the "
                         "version that saved it")
    return header, arrays


def load(strategy, data, what="the state"):
    """Restores the state of `data` (an .npz file's bytes) into `strategy`,
    which must be configured as the one that saved it."""
    from deepreduce_tf.federated.codec import ModelCodec, model_crc

    header, arrays = _read(data, what)
    mine = _configuration(strategy)
    for key, value in mine.items():
        if header.get(key) != value:
            raise ValueError(f"{what} was saved by a strategy with {key}={header.get(key)!r}; "
                             f"this one has {key}={value!r}: build the strategy as the one "
                             "that saved it")
    names = header.get("names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what}: 'names' is not a list of tensor names")
    used = set()

    def model(prefix):
        out = []
        for i in range(len(names)):
            key = f"{prefix}/{i}"
            if key not in arrays:
                raise ValueError(f"{what}: array {key!r} is missing")
            used.add(key)
            out.append(arrays[key])
        return out

    model_hat = model("model_hat")
    codec = ModelCodec.for_arrays(json.loads(strategy.params_json), names, model_hat)
    source, initial = model("source"), model("initial")
    for label, m in (("model_hat", model_hat), ("source", source), ("initial", initial)):
        codec.check_arrays(m, f"{what}: {label}")
    held_nodes = _int_list(header, "held", what)
    held = []
    for k, node in enumerate(held_nodes):
        m = model(f"held/{k}")
        codec.check_arrays(m, f"{what}: the model of node {node}")
        held.append((node, m))
    versions = {}
    for v in _int_list(header, "versions", what):
        key = f"version/{v}"
        if key not in arrays or arrays[key].dtype != np.uint8 or arrays[key].ndim != 1:
            raise ValueError(f"{what}: version {v}'s payload is missing or not bytes")
        used.add(key)
        versions[v] = arrays[key].tobytes()
    inner, saved = _inner_hooks(strategy), header.get("strategy")  # None: written without
    wrapped = type(strategy.strategy).__name__
    if inner is None and saved is not None:
        raise ValueError(f"{what} holds the state of a wrapped {saved.get('class')!r}; this "
                         f"strategy wraps {wrapped!r}, which keeps none: build the strategy as "
                         "the one that saved it")
    if inner is not None:
        if not isinstance(saved, dict) or not isinstance(saved.get("arrays"), list):
            raise ValueError(f"{what} holds no state of the wrapped {wrapped!r} (saved by a "
                             "strategy wrapping another one, or by a deepreduce_tf that did not "
                             "save it): build the strategy as the one that saved it")
        if saved.get("class") != wrapped:
            raise ValueError(f"{what} holds the state of a wrapped {saved.get('class')!r}; this "
                             f"strategy wraps {wrapped!r}")
        inner_arrays = {}
        for name in saved["arrays"]:
            key = _INNER + str(name)
            if key not in arrays:
                raise ValueError(f"{what}: array {key!r} is missing")
            used.add(key)
            inner_arrays[name] = arrays[key]
    extra = sorted(set(arrays) - used)
    if extra:
        raise ValueError(f"{what} has arrays no state names: {extra[:5]}")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0 or any(
            not 0 < v <= version for v in versions):
        raise ValueError(f"{what}: the version counter {version!r} does not cover the "
                         f"versions kept {sorted(versions)}")
    synced = header.get("synced")
    if not isinstance(synced, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(v, int) for v in p)
            and 0 <= p[1] <= version for p in synced):
        raise ValueError(f"{what}: 'synced' is not a list of [node, version] pairs")
    seen = _int_list(header, "seen", what)
    steps = header.get("steps")
    if not isinstance(steps, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in steps.values()):
        raise ValueError(f"{what}: 'steps' is not a map of step counters")
    rounds, rejected = header.get("rounds"), header.get("rejected")
    if not isinstance(rounds, list) or not all(isinstance(r, dict) for r in rounds):
        raise ValueError(f"{what}: 'rounds' is not a list of per-round records")
    if not isinstance(rejected, list) or not all(isinstance(r, list) for r in rejected):
        raise ValueError(f"{what}: 'rejected' is not a list of [round, node, reason] records")

    server_codec = (ModelCodec.for_arrays(json.loads(strategy.server_params_json), names,
                                          model_hat)
                    if strategy.server_params_json else None)
    if server_codec is not None:
        server_codec.set_step_counters(steps)
    if inner is not None:  # checks its own state; changes nothing if that raises
        inner.load_server_state(saved.get("settings"), inner_arrays, source)

    # Everything checked: replace the strategy's state.
    strategy._names = list(names)
    strategy._client_codec = codec
    strategy._server_codec = server_codec
    strategy._model_hat = model_hat
    strategy._model_hat_crc = model_crc(model_hat)
    strategy._source = source
    strategy._initial = initial
    strategy._version = version
    strategy._versions = versions
    strategy._synced = {n: v for n, v in synced}
    strategy._held.clear()
    for node, m in held:
        strategy._held[node] = m
    strategy._held_bytes = len(held) * codec.dense_bytes
    while strategy._held and strategy._held_bytes > strategy.node_memory_bytes:
        strategy._held.popitem(last=False)  # this strategy's own bound
        strategy._held_bytes -= codec.dense_bytes
    strategy._seen = set(seen)
    strategy.rounds = rounds
    strategy.rejected = [tuple(r) for r in rejected]
