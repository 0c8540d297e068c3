"""Communicators own the step: a new exchange is one subclass of
communicators.Communicator, used by DeepReduceCrossDeviceOps unchanged."""
import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import communicators, transport
from deepreduce_tf import distribute as drd

DEVICES = ["/cpu:0", "/cpu:1"]


class RootRecompress(communicators.Communicator):
    """A parameter-server-style exchange written against the public pieces
    only: every replica's batch payload goes to the root (the reduce device),
    which decodes and sums them, then compresses the SUM again with its own
    compressor (its own residual: error feedback on the way down) and sends
    that one payload back to every replica."""

    name = "root_recompress"

    def __init__(self, params):
        self.root = dr.from_params(params)

    def reduce_flat(self, transport_, compressors, tensors_by_replica, keys):
        payloads, ctx = [], None
        for comp, device, tensors in zip(compressors, transport_.devices, tensors_by_replica):
            with tf.device(device):
                p, c = comp.compress_batch(tensors, keys)
            payloads.append(p)
            ctx = ctx or c
        received = transport_.all_gather(payloads)
        with tf.device(transport_.reduce_device):
            decoded = [compressors[0].decompress_batch_flat(p, ctx) for p in received]
            sums = [transport.ordered_sum(parts) for parts in zip(*decoded)]
            down, down_ctx = self.root.compress_batch(ctx.plan.unpack(sums), keys)
            return down_ctx.plan, self.root.decompress_batch_flat(down, down_ctx)


def _grads(rng, replica):
    return [tf.constant(rng.normal(size=s).astype(np.float32) * (replica + 1))
            for s in [(40, 50), (30,), (64, 16)]]


def test_a_new_communicator_is_one_class(rng):
    params = {"compressor": "topk", "compress_ratio": 0.05, "deepreduce": "both",
              "index": "golomb", "value": "qsgd", "bits": 7, "min_size": 64}
    comm = RootRecompress(params)
    ops = drd.DeepReduceCrossDeviceOps(params, communicator=comm)
    strategy = tf.distribute.MirroredStrategy(DEVICES, cross_device_ops=ops)
    grads = [_grads(rng, r) for r in range(2)]

    per_replica = [strategy.experimental_distribute_values_from_function(
        lambda ctx, i=i: grads[ctx.replica_id_in_sync_group][i]) for i in range(3)]
    out = strategy.extended.batch_reduce_to(
        tf.distribute.ReduceOp.SUM, [(v, v) for v in per_replica])

    # The reference: the same pieces, by hand.
    workers = [dr.from_params(params) for _ in range(2)]
    root = dr.from_params(params)
    keys = [f"value_{i}_of_3/float32[{'x'.join(map(str, g.shape))}]"
            for i, g in enumerate(grads[0])]
    sent = [w.compress_batch(g, keys) for w, g in zip(workers, grads)]
    ctx = sent[0][1]
    total = [a + b for a, b in zip(*[workers[0].decompress_batch(p, ctx) for p, _ in sent])]
    p, c = root.compress_batch(total, keys)
    want = root.decompress_batch(p, c)
    for i in range(3):
        values = strategy.experimental_local_results(out[i])
        for v in values:
            np.testing.assert_array_equal(v.numpy(), want[i].numpy())
    # the root's error feedback holds what the second compression left out
    assert comm.root.memory.residuals


def test_communicator_override_is_checked():
    with pytest.raises(TypeError, match="Communicator"):
        drd.DeepReduceCrossDeviceOps({"compressor": "none"}, communicator="allreduce")
    with pytest.raises(ValueError, match="allreduce"):
        drd.DeepReduceCrossDeviceOps({"compressor": "topk"},
                                     communicator=communicators.Allreduce())


def test_the_communicator_is_chosen_once_for_every_path(rng):
    # Compression off, no communicator key: these ops choose the all-reduce
    # route, although from_params gives such a compressor an all-gather. The
    # per-replica compressors, and an exchange_locally over them, must use
    # that one choice (they used to keep the all-gather).
    ops = drd.DeepReduceCrossDeviceOps({"compressor": "none"})
    assert isinstance(ops.communicator, communicators.Allreduce)
    lists = []
    for r, d in enumerate(DEVICES):
        with tf.device(d):
            lists.append(_grads(rng, r))
    ops.reduce_tensors(lists)
    assert len(ops.compressors) == 2
    assert all(c.communicator is ops.communicator for c in ops.compressors)
    x = [tf.constant(np.arange(3000, dtype=np.float32) * (r + 1)) for r in range(2)]
    results, payloads = communicators.exchange_locally(ops.compressors, x, name="w")
    # All-reduce payloads are the summable values themselves, not uint8 frames.
    assert all(v.dtype == tf.float32 for p in payloads for v in p)
    np.testing.assert_array_equal(results[0].numpy(), x[0].numpy() + x[1].numpy())


def test_local_transport_sums_in_order_and_places_results():
    t = transport.LocalTransport(DEVICES)
    vals = []
    for d, x in zip(DEVICES, (1.0, 2.0)):
        with tf.device(d):
            vals.append([tf.constant([x, x]), tf.constant([3 * x])])
    sums = t.all_reduce(vals)
    np.testing.assert_array_equal(sums[0].numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(sums[1].numpy(), [9.0])
    copies = t.replicate(sums[0])
    assert [c.device.endswith(f"device:CPU:{i}") for i, c in enumerate(copies)] == [True, True]
    with pytest.raises(ValueError, match="2 devices but 1 payloads"):
        t.all_gather([tf.zeros([3], tf.uint8)])


def test_allreduce_keeps_the_residual_finite_after_an_overflow(rng):
    """One step holding NaN travels (loss scaling must see it) but does not
    enter the residual: later steps are finite again."""
    params = {"compressor": "randomk", "compress_ratio": 0.2, "communicator": "allreduce",
              "memory": "residual", "min_size": 0}
    workers = [dr.from_params(params) for _ in range(2)]
    bad = rng.normal(size=(50,)).astype(np.float32)
    bad[7] = np.nan
    results, _ = communicators.exchange_locally(
        workers, [tf.constant(bad), tf.constant(rng.normal(size=(50,)).astype(np.float32))],
        name="v")
    for w in workers:
        assert np.isfinite(w.memory.residuals["v"].numpy()).all()
    for _ in range(10):
        grads = [tf.constant(rng.normal(size=(50,)).astype(np.float32)) for _ in workers]
        results, _ = communicators.exchange_locally(workers, grads, name="v")
        assert np.isfinite(results[0].numpy()).all()


class HalfSum(communicators.Communicator):
    """A communicator written against the step's one override, transfer():
    every bucket travels as float16 through the transport's all-reduce. The
    base class prepares (compensates with memory), commits (memory keeps what
    the receivers did not decode; the ledger records) and finishes."""

    name = "half_sum"
    additive = True

    def transfer(self, transport_, exchanges, plan, prepared, keys):
        vectors, outcomes = [], []
        for ex, device, preps in zip(exchanges, transport_.devices, prepared):
            with tf.device(device):
                mine, outs = [], []
                for bucket, prep in zip(plan.buckets, preps):
                    x = prep.x if bucket.sparse_n else tf.zeros([0], bucket.dtype)
                    wire = tf.cast(x, tf.float16)
                    mine += [wire, prep.rest]
                    sent = dr.memory.Sent(x - tf.cast(wire, x.dtype), tf.zeros([0], tf.int64),
                                          tf.zeros([0], x.dtype)) if bucket.sparse_n else None
                    nbytes = tf.constant(2 * bucket.sparse_n + 4 * bucket.dense_n, tf.int64)
                    outs.append(dr.exchange.endpoint.Outcome(sent, None, dr.compressor.BucketContext(
                        bucket.key, bucket, bucket.dtype, bucket.n, bucket.nbytes, nbytes)))
            vectors.append(mine)
            outcomes.append(outs)
        summed = transport_.all_reduce(vectors)
        sums = [tf.concat([tf.cast(summed[2 * i], b.dtype), summed[2 * i + 1]], 0)
                for i, b in enumerate(plan.buckets)]
        return communicators.Transfer(sums, outcomes, [[] for _ in exchanges],
                                      [[] for _ in exchanges])


def test_a_communicator_overrides_only_what_travels(rng):
    params = {"compressor": "none", "memory": "residual", "min_size": 64}
    comm = HalfSum()
    ops = drd.DeepReduceCrossDeviceOps(params, communicator=comm)
    grads = [_grads(rng, r) for r in range(2)]
    lists = []
    for d, g in zip(DEVICES, grads):
        with tf.device(d):
            lists.append([tf.identity(t) for t in g])
    out = ops.reduce_tensors(lists)
    for i in range(3):
        g = [grads[r][i].numpy() for r in range(2)]
        if g[0].size >= 64:  # sparse section: summed in float16 on the wire
            want = (g[0].astype(np.float16) + g[1].astype(np.float16)).astype(np.float32)
        else:
            want = g[0] + g[1]
        for r in range(2):
            np.testing.assert_array_equal(out[r][i].numpy(), want)
    # Error feedback by the base class: each replica keeps exactly x - fp16(x).
    for r, ex in enumerate(ops.compressors):
        assert ex.communicator is comm
        (residual,) = ex.memory.residuals.values()
        flat = np.concatenate([grads[r][i].numpy().ravel() for i in (0, 2)])
        np.testing.assert_array_equal(residual.numpy(),
                                      flat - flat.astype(np.float16).astype(np.float32))
    assert ops.step_bytes()["sent_bytes"] == 2 * (40 * 50 + 64 * 16) + 4 * 30


@pytest.mark.parametrize("communicator", ["allreduce", "allgather"])
def test_each_worker_clips_before_the_sum(rng, communicator):
    """clip_norm is part of the shared prepare: every communicator sums each
    worker's gradient scaled to an L2 norm of at most clip_norm (numpy)."""
    params = {"compressor": "none", "communicator": communicator, "memory": "none",
              "clip_norm": 1.5, "min_size": 0}
    workers = [dr.from_params(params) for _ in range(2)]
    grads = [rng.normal(size=(30,)).astype(np.float32) * s for s in (0.1, 3.0)]
    results, _ = communicators.exchange_locally(workers, [tf.constant(g) for g in grads],
                                                name="v")
    want = sum(g * min(1.0, 1.5 / np.linalg.norm(g)) for g in grads)
    assert np.linalg.norm(grads[1]) > 1.5 > np.linalg.norm(grads[0])
    for r in results:
        np.testing.assert_allclose(r.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("params", [
    {"compressor": "powersgd", "rank": 2, "memory": "residual", "min_size": 16},
    {"compressor": "topk", "compress_ratio": 0.05, "communicator": "lgc_ps", "memory": "residual",
     "lgc_warmup_steps": 1, "lgc_train_steps": 1, "lgc_channels": "4,8,16,32", "min_size": 16},
    {"compressor": "topk", "compress_ratio": 0.05, "communicator": "lgc_rar",
     "memory": "residual", "lgc_warmup_steps": 1, "lgc_train_steps": 1,
     "lgc_channels": "4,8,16,32", "min_size": 16},
    {"compressor": "randomk", "compress_ratio": 0.1, "communicator": "allreduce",
     "memory": "residual", "min_size": 16},
    {"compressor": "topk", "compress_ratio": 0.05, "memory": "dgc", "deepreduce": "both",
     "index": "golomb", "value": "qsgd", "bits": 7, "min_size": 16},
])
def test_exchange_locally_is_the_multi_replica_step(rng, params):
    """exchange_locally runs the real step of every communicator (PowerSGD and
    LGC included, through all three LGC phases): step by step the same sums,
    bit for bit, as DeepReduceCrossDeviceOps over two devices."""
    ops = drd.DeepReduceCrossDeviceOps(params)
    local = [dr.from_params(params) for _ in DEVICES]
    for _ in range(4):
        grads = [rng.normal(size=(64, 48)).astype(np.float32) * (r + 1) for r in range(2)]
        lists = []
        for d, g in zip(DEVICES, grads):
            with tf.device(d):
                lists.append([tf.constant(g)])
        want = ops.reduce_tensors(lists)
        # The key the ops give this tensor (it seeds random-k, QSGD, PowerSGD's Q).
        key = drd._memory_key(0, 1, lists[0][0])  # pylint: disable=protected-access
        with tf.device(DEVICES[0]):
            got, handed = communicators.exchange_locally(local, [tf.constant(g) for g in grads],
                                                         name=key)
        for r in range(2):
            np.testing.assert_array_equal(got[r].numpy(), want[0][0].numpy())
        assert all(handed) and len(handed) == 2


def test_repr_says_what_the_object_is():
    ex = dr.from_params({"compressor": "powersgd", "rank": 2})
    assert repr(ex).startswith("Exchange(Compressor(") and "PowerSGD(rank=2" in repr(ex)
    assert repr(ex.compressor).startswith("Compressor(")


COMMUNICATOR_PARAMS = {
    "allgather": {"compressor": "topk", "compress_ratio": 0.05, "deepreduce": "both",
                  "index": "golomb", "value": "qsgd", "bits": 7},
    "allreduce": {"compressor": "randomk", "compress_ratio": 0.1, "communicator": "allreduce"},
    "powersgd": {"compressor": "powersgd", "rank": 2},
    "lgc_ps": {"compressor": "topk", "compress_ratio": 0.05, "communicator": "lgc_ps",
               "lgc_warmup_steps": 1, "lgc_train_steps": 1, "lgc_channels": "4,8,16,32"},
    "lgc_rar": {"compressor": "topk", "compress_ratio": 0.05, "communicator": "lgc_rar",
                "lgc_warmup_steps": 1, "lgc_train_steps": 1, "lgc_channels": "4,8,16,32"},
    "sparse_allreduce": {"compressor": "topk", "compress_ratio": 0.05,
                         "communicator": "sparse_allreduce", "deepreduce": "both",
                         "index": "golomb", "value": "fp16"},
}


@pytest.mark.parametrize("name", sorted(COMMUNICATOR_PARAMS))
def test_the_nonfinite_rules_hold_for_every_communicator(rng, name):
    """The step's non-finite policy is one rule (Exchange.prepare / commit):
    'raise' fails a step holding NaN with a message naming the tensor and the
    policy; 'dense' lets it travel but leaves the residual of the worker whose
    step held it as it was (PowerSGD: every worker's), all of them finite."""
    params = dict(COMMUNICATOR_PARAMS[name], memory="residual", min_size=16)
    good = [rng.normal(size=(64, 48)).astype(np.float32) for _ in range(2)]
    bad = [g.copy() for g in good]
    bad[1][3, 5] = np.nan
    workers = [dr.from_params(dict(params, nonfinite="raise")) for _ in range(2)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="nonfinite='raise'"):
        communicators.exchange_locally(workers, [tf.constant(g) for g in bad], name="w")
    # The failed step advanced every worker's counters alike (seeds, phases stay in step).
    assert len({int(v.numpy()) for w in workers for v in w.steps.values()}) <= 1
    workers = [dr.from_params(params) for _ in range(2)]
    communicators.exchange_locally(workers, [tf.constant(g) for g in good], name="w")
    before = [[v.numpy() for v in w.memory.residuals.values()] for w in workers]
    out, _ = communicators.exchange_locally(workers, [tf.constant(g) for g in bad], name="w")
    # They send such a step dense: the sum shows it.
    if name in ("allgather", "powersgd", "sparse_allreduce"):
        assert not np.isfinite(out[0].numpy()).all()
    after = [[v.numpy() for v in w.memory.residuals.values()] for w in workers]
    for x, y in zip(before[1], after[1]):  # the worker whose step held NaN
        np.testing.assert_array_equal(x, y)
    assert all(np.isfinite(y).all() for a in after for y in a)


def test_each_rule_of_the_step_is_written_once():
    """The step's rules live in one place each (Exchange.prepare / commit,
    compressor.bucket_record), not in every communicator."""
    import pathlib

    root = pathlib.Path(dr.__file__).parent
    text = {p: p.read_text() for p in root.rglob("*.py")}

    def count(needle):
        return sum(t.count(needle) for t in text.values())

    assert count('nonfinite == "raise"') == 1
    assert count("BucketContext(") == 1  # compressor.bucket_record
    # "keep the residual on a non-finite step": Exchange.nonfinite_rule (its two cases)
    assert count("tf.logical_not(tf.reduce_all(tf.math.is_finite(") == 2
    assert count("setattr(self, name") == 0  # state is declared, not attached


def test_the_kernel_is_chosen_in_one_place():
    """exchange/, learned/, the compressor, memory and sparsifiers gather and
    scatter through the op wrappers (deepreduce_tf.ops), which choose the
    kernel for the replica's device; none calls TensorFlow's directly."""
    import pathlib

    root = pathlib.Path(dr.__file__).parent
    for path in root.rglob("*.py"):
        if path.parent.name == "ops":
            continue
        text = path.read_text()
        for call in ("tf.scatter_nd", "tf.gather(", "tf.tensor_scatter_nd"):
            assert call not in text, f"{path.relative_to(root)} calls {call} directly"
