"""Learned Gradient Compression (Abrahamyan et al., IEEE TNNLS 2021): the
communicators 'lgc_ps' and 'lgc_rar'. The design is in docs/lgc.md.

Per fused bucket, every exchange has two rounds:

  A  the leader (replica lgc_leader) picks its top-k positions P of its
     compensated gradient x_L and sends them, coded by the index codec, with
     its RMS s over P and the exchange number (all-gather; the other
     replicas send nothing). Every replica then takes v_i = x_i[P]: all
     nodes speak about the same k positions, so their values line up.
  B  depends on the phase (exchanges counted per bucket, the same count
     on every worker; round A carries the leader's, a mismatch is an error):
       1  warm-up (lgc_warmup_steps): v_i travels coded by the value codec;
       2  training (lgc_train_steps): the same, and every process trains the
          autoencoder online on what it received (one Adam step);
       3  compressed: at its first exchange the weights of replica 0 are
          broadcast once (counted), then
          lgc_ps   the leader sends its latent E(v_L / s) (value codec) and
                   every replica its "innovation", the lgc_innovation share of
                   its k values that its own reconstruction misses most
                   (index + value codec); node i is decoded as s D_i(z_L),
                   its innovation values written over it.
          lgc_rar  a linear autoencoder: every replica's latent E(v_i / s) is
                   summed by an all-reduce (bytes per worker do not grow with
                   the number of workers), and s D(sum) is the sum.
The sum is scattered at P; the dense section of the bucket (small tensors)
is all-reduced in its own dtype.

Error feedback: replica i's residual is x_i minus what the receivers
decoded as its contribution (c_i at P): exact for PS and phases 1-2 (every
receiver decodes every contribution), and for RAR exact up to rounding
because the decoder is linear (sum of D(z_i) = D(sum of z_i)).
"""
import zlib

import numpy as np
import tensorflow as tf

from deepreduce_tf._checks import check, guarded
from deepreduce_tf._variables import StateVar, ensure_initialized, state_scope
from deepreduce_tf.accounting import ring_received
from deepreduce_tf.codecs.base import Param
from deepreduce_tf.compressor import SUMMABLE_WIRE_DTYPES, Compressor, bucket_record
from deepreduce_tf.exchange.allgather import Allgather
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.endpoint import Exchange, Outcome
from deepreduce_tf.exchange.rounds import Branch, Gather, Sum
from deepreduce_tf.learned.autoencoder import (Autoencoder, latent_length, parse_channels,
                                               polyphase_init)
from deepreduce_tf.memory import Sent
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import payload as payload_ops
from deepreduce_tf.ops import sparsify as sparsify_ops
from deepreduce_tf.sparsifiers import make_sparsifier
from deepreduce_tf.transport import ordered_sum

KIND_INDEX = 16  # payload kinds of the two rounds and of the weight broadcast
KIND_VALUES = 17
KIND_WEIGHTS = 18
INDEX_FIELDS = ("exchange", "n", "k", "aux0", "aux1", "scale", "config")
VALUE_FIELDS = ("exchange", "phase", "config")
WEIGHT_FIELDS = ("count", "config")


def _check_channels(value):
    parse_channels(value)


PARAMS = (
    Param("lgc_warmup_steps", int, 100, low=0,
          help="phase 1: exchanges at the leader's top-k positions before training"),
    Param("lgc_train_steps", int, 200, low=0,
          help="phase 2: exchanges during which the autoencoder trains (one Adam step each)"),
    Param("lgc_lr", float, 1e-3, low=0, low_open=True, help="the autoencoder's Adam rate"),
    Param("lgc_innovation", float, 0.05, low=0, high=1, low_open=True,
          help="lgc_ps only: share of the k values each node also sends exactly (its innovation)"),
    Param("lgc_channels", str, "64,128,256,64", check=_check_channels,
          help="channels of the four strided convolutions of the autoencoder"),
    Param("lgc_latent_channels", int, 4, low=1, high=64,
          help="latent channels (latent = k/16 x this floats)"),
    Param("lgc_leader", int, 0, low=0, help="the replica whose top-k positions all use"),
    Param("lgc_activation", str, None, choices=("leaky_relu", "linear"),
          help="the autoencoder's layers: leaky_relu (with biases; lgc_ps's default, the "
               "paper's) or linear (lgc_rar needs it)"),
    Param("lgc_init", str, "identity", choices=("identity", "random"),
          help="the autoencoder's first weights: identity (decode(encode(v)) = v for the kept "
               "latent channels) or random (Glorot)"),
)
PARAM_KEYS = tuple(p.key for p in PARAMS)


def _fingerprint(*parts):
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


class _Lgc(Communicator):
    """What both variants share: round A, phases, the autoencoder."""

    PARAMS = PARAMS
    collectives = ("gather", "sum")
    default_activation = None
    per_node_decoders = False

    def __init__(self, lgc_warmup_steps=100, lgc_train_steps=200, lgc_lr=1e-3,
                 lgc_innovation=0.05, lgc_channels="64,128,256,64", lgc_latent_channels=4,
                 lgc_leader=0, lgc_activation=None, lgc_init="identity", seed=0):
        for param, value in zip(PARAMS, (lgc_warmup_steps, lgc_train_steps, lgc_lr,
                                         lgc_innovation, lgc_channels, lgc_latent_channels,
                                         lgc_leader, lgc_activation, lgc_init)):
            param.validate(value)
        self.init = lgc_init
        self.activation = lgc_activation or self.default_activation
        if self.activation != "linear" and not self.per_node_decoders:
            raise ValueError(f"communicator {self.name!r} sums latents, so its autoencoder must "
                             f"be linear: lgc_activation={lgc_activation!r} is not possible "
                             "(leave it unset, or use 'linear')")
        self.ae_kind = "nonlinear" if self.activation == "leaky_relu" else "linear"
        self.warmup_steps = int(lgc_warmup_steps)
        self.train_steps = int(lgc_train_steps)
        self.lr = float(lgc_lr)
        self.innovation = float(lgc_innovation)
        self.channels = parse_channels(lgc_channels)
        self.latent_channels = int(lgc_latent_channels)
        self.leader = int(lgc_leader)
        self.seed = int(seed)
        if self.init == "identity":  # refuse channels too narrow now, not at the first step
            polyphase_init(self.ae_kind, self.channels, self.latent_channels,
                           np.random.default_rng(0))

    def config(self):
        return {"lgc_warmup_steps": self.warmup_steps, "lgc_train_steps": self.train_steps,
                "lgc_lr": self.lr, "lgc_innovation": self.innovation,
                "lgc_channels": ",".join(map(str, self.channels)),
                "lgc_latent_channels": self.latent_channels, "lgc_leader": self.leader,
                "lgc_activation": self.activation, "lgc_init": self.init}

    def __repr__(self):
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({cfg})"

    # ------------------------------------------------------------ checks
    def check(self, exchange):
        problems = []
        sp = exchange.sparsifier
        if sp.name != "topk":
            problems.append(f"it sends values at the leader's top-k positions, but the "
                            f"compressor is {sp.name!r} (use compressor='topk')")
        policy = getattr(exchange.index_codec, "policy", None)
        if exchange.index_codec.name == "bloom" and policy == "p0":
            problems.append("Bloom policy p0 decodes false positives (more than K positions); "
                            "use another policy or a lossless index codec")
        if exchange.warmup_steps:  # clipping is the step's, as for every communicator
            problems.append("warmup_steps is the all-gather exchange's (LGC has its own "
                            "warm-up: lgc_warmup_steps)")
        problems += self._check_values(exchange)
        if problems:
            raise ValueError(f"communicator {self.name!r}: " + "; ".join(problems))

    def _check_values(self, exchange):
        return []

    # ------------------------------------------------------------ state
    def counts(self, exchange):
        # The step's counters (Exchange.prepare) number the exchanges of each
        # bucket: LGC's phases; no seed.
        return True, False

    def state_vars(self):
        # On the exchange of the process's first replica (per='process').
        return (StateVar("autoencoder", "float32", "its weights and Adam slots", "process"),
                StateVar("lgc_signature", "int64", "[]", "process"),
                StateVar("lgc_codecs/step", "int64", "[]", "bucket"))  # helper codecs' seeds

    def make_state(self, exchange):
        state = tf.Module(name="lgc")
        state.autoencoder = None
        state.signature = None
        state.codecs = None
        return state

    def _state(self, comp, num_replicas):
        """The process's LGC state (autoencoder, exchange counters), kept in
        its first replica's exchange so that it is checkpointed with it."""
        state = comp.communicator_state
        if state.autoencoder is None:
            with state_scope():
                decoders = num_replicas if self.per_node_decoders else 1
                state.autoencoder = Autoencoder(self.ae_kind, decoders, self.channels,
                                                self.latent_channels, self.lr, self.seed,
                                                comp.variable_factory,
                                                identity_init=self.init == "identity")
                # What the state was made for (0: not yet known): a fingerprint
                # of the configuration and the model's buckets.
                state.signature = comp.variable_factory(tf.constant(0, tf.int64),
                                                        "lgc_signature")
        if state.autoencoder.num_decoders != (num_replicas if self.per_node_decoders else 1):
            raise ValueError(f"{self.name}: this autoencoder has "
                             f"{state.autoencoder.num_decoders} decoders, made for another "
                             f"number of replicas than {num_replicas}")
        return state

    def _helpers(self, comp, k):
        """Per-replica helper exchanges: the value codec over dense vectors
        (values, latents) and top-k + codecs for the innovation (no memory,
        no ledger; their step counters seed a seeded value codec)."""
        state = comp.communicator_state
        if state.codecs is None:
            with state_scope():
                helpers = tf.Module(name="lgc_codecs")
                helpers.values = Exchange(
                    Compressor(make_sparsifier("none"), None, comp.value_codec, min_size=0,
                               seed=comp.seed),
                    communicator=Allgather(), ledger=None,
                    variable_factory=comp.variable_factory)
                helpers.innovation = Exchange(
                    Compressor(make_sparsifier("topk", compress_ratio=self.innovation),
                               comp.index_codec, comp.value_codec, min_size=0, seed=comp.seed),
                    communicator=Allgather(), ledger=None,
                    variable_factory=comp.variable_factory)
                state.codecs = helpers
        return state.codecs

    def phase_of(self, exchange):
        """1, 2 or 3 for exchange number `exchange` (1 = the first)."""
        if exchange <= self.warmup_steps:
            return 1
        return 2 if exchange <= self.warmup_steps + self.train_steps else 3

    # ------------------------------------------------------------ round A
    def _config_id(self, key, bucket, k, comp):
        return _fingerprint(self.name, sorted(self.config().items()), key, bucket.sparse_n, k,
                            comp.index_codec.codec_id, comp.value_codec.codec_id)

    def _leader_payload(self, comp, x, bucket, k, exchange, config):
        idx = comp.sparsifier.select_segments(x, bucket.lengths, exchange)
        enc = comp.index_codec.encode(tf.cast(idx, tf.int64), bucket.sparse_n)
        positions = tf.cast(idx if enc.positions is None else enc.positions, tf.int64)
        values = fusion_ops.gather(tf.cast(x, tf.float32), positions)
        scale = tf.sqrt(tf.reduce_mean(tf.square(values)))
        scale = tf.where(tf.logical_and(tf.math.is_finite(scale), scale > 0), scale, 1.0)
        bits = tf.cast(tf.bitcast(scale, tf.uint32), tf.int64)
        meta = tf.stack([exchange, tf.constant(bucket.sparse_n, tf.int64),
                         tf.constant(k, tf.int64), tf.cast(enc.aux[0], tf.int64),
                         tf.cast(enc.aux[1], tf.int64), bits, tf.constant(config, tf.int64)])
        return payload_ops.pack([enc.section], meta, kind=KIND_INDEX)

    def _read_leader(self, comp, payload, bucket, k, exchange, config):
        meta, (section,) = payload_ops.unpack(
            payload, 1, len(INDEX_FIELDS), kind=KIND_INDEX, field_names=INDEX_FIELDS,
            expected={"n": bucket.sparse_n, "k": k, "config": config})
        agree = check(tf.equal(meta[0], exchange),
                      f"{self.name}: phase mismatch between workers: the leader's exchange "
                      "number differs from this worker's (workers restored from different "
                      "checkpoints, or one skipped a step); restart them from one checkpoint")
        positions = comp.index_codec.decode(section, bucket.sparse_n, meta[2], (meta[3], meta[4]))
        positions = tf.ensure_shape(tf.cast(positions, tf.int64), [k])
        scale = tf.bitcast(tf.cast(meta[5], tf.uint32), tf.float32)
        ok = check(tf.logical_and(tf.math.is_finite(scale), scale > 0),
                   f"{self.name}: the leader's scale is not a positive finite number")
        return guarded(positions, agree, ok), guarded(scale, agree, ok)

    # ------------------------------------------------------------ the step
    def rounds(self, group, exchanges, plan, prepared, keys):
        R = group.num_replicas
        first = group.first_rank
        if first is None:
            if len(group.devices) != R:
                raise NotImplementedError(
                    f"{self.name} needs every replica's global number, which this transport "
                    "does not give: use deepreduce_tf.distribute.multi_worker_strategy() or "
                    "install() across workers, DeepReduceCrossDeviceOps in one process")
            first = 0
        ranks = [first + d for d in range(len(group.devices))]
        if self.leader >= R:
            raise ValueError(f"{self.name}: lgc_leader={self.leader} but the group has only "
                             f"{R} replicas")
        with tf.device(group.reduce_device):
            state = self._state(exchanges[0], R)
            signed = self._check_signature(state, plan)
        ae = state.autoencoder
        sums = []
        outcomes = [[] for _ in exchanges]
        received = [[] for _ in exchanges]
        for b, bucket in enumerate(plan.buckets):
            key = bucket.key
            if not bucket.sparse_n:
                rests = [[p[b].rest] for p in prepared]
                (total,) = yield Sum(rests)
                got = self.reduced(group, rests[0])
                for r, rest in enumerate(rests):
                    nbytes = tf.size(rest[0], out_type=tf.int64) * rest[0].dtype.size
                    outcomes[r].append(Outcome(None, None, bucket_record(bucket, nbytes)))
                    received[r].append((f"lgc/{key}", got))
                sums.append(total)
                continue
            # The weights are broadcast once per exchange, with the first sparse bucket.
            first = all(not x.sparse_n for x in plan.buckets[:b])
            out, outs, got = yield from self._bucket(group, exchanges, [p[b] for p in prepared],
                                                     bucket, ranks, state, ae, broadcast=first)
            sums.append(out)
            for r in range(len(exchanges)):
                outcomes[r].append(outs[r])
                received[r].append((f"lgc/{key}", got[r]))
        sums = [guarded(s_, signed) for s_ in sums]
        return Transfer(sums, outcomes, [[] for _ in exchanges], received)

    def _check_signature(self, state, plan):
        """Adopts this model's signature on the first exchange; afterwards (a
        restored checkpoint included) a different one is an error."""
        sig = 1 + _fingerprint(self.name, sorted(self.config().items()),
                               [(b.key, b.sparse_n, b.dense_n) for b in plan.buckets])
        var = state.signature
        with tf.control_dependencies(ensure_initialized([var])):
            old = var.read_value()
        ok = check(tf.logical_or(tf.equal(old, 0), tf.equal(old, sig)),
                   f"{self.name}: the exchange state (autoencoder, phase) was restored from a "
                   "checkpoint of another model or LGC configuration; restore this model's "
                   "checkpoint, or start without one")
        return var.assign(guarded(tf.constant(sig, tf.int64), ok),
                          read_value=False) or tf.no_op()

    def _bucket(self, group, exchanges, prepared, bucket, ranks, state, ae, broadcast=True):
        """One bucket's two rounds. prepared[r]: replica r's Prepared bucket
        (x compensated). Returns (the summed flat bucket, per replica its
        Outcome and the bytes it received)."""
        R = group.num_replicas
        key, n = bucket.key, bucket.sparse_n
        head = exchanges[0]
        ratio = head.sparsifier.compress_ratio
        if head.sparsifier.scope == "bucket" or len(bucket.lengths) == 1:
            k = int(sparsify_ops.k_for_ratio(n, ratio))
        else:
            k = int(sum(sparsify_ops.segment_ks(bucket.lengths, ratio)))
        config = self._config_id(key, bucket, k, head)
        with tf.device(group.reduce_device):
            # The bucket's exchange number: the step's counter (Exchange.prepare).
            with tf.control_dependencies(ensure_initialized(ae.variables_all)):
                exchange = tf.identity(prepared[0].step)
        xs = [prep.x for prep in prepared]
        # Round A: the leader's positions and scale.
        sent_a = []
        for ex, device, x, rank in zip(exchanges, group.devices, xs, ranks):
            with tf.device(device):
                if rank == self.leader:
                    sent_a.append(self._leader_payload(ex, x, bucket, k, exchange, config))
                else:
                    sent_a.append(tf.zeros([0], tf.uint8))
        received = yield Gather(sent_a, f"lgc/A/{key}")
        everyone_a = tf.add_n([tf.size(p, out_type=tf.int64) for p in received])
        with tf.device(group.reduce_device):
            positions, scale = self._read_leader(head, received[self.leader], bucket, k,
                                                 exchange, config)
        values = []
        for device, x in zip(group.devices, xs):
            with tf.device(device):
                values.append(fusion_ops.gather(x, positions))
        phase3 = exchange > self.warmup_steps + self.train_steps
        training = tf.logical_and(exchange > self.warmup_steps, tf.logical_not(phase3))
        first3 = tf.equal(exchange, self.warmup_steps + self.train_steps + 1)
        if broadcast:
            sync_bytes = yield self._sync_weights(group, ranks, ae, first3, config, key)
        else:
            sync_bytes = tf.constant(0, tf.int64)
        with tf.control_dependencies([sync_bytes]):
            total, mine, sent_b, received_b, data = yield from self._round_b(
                group, exchanges, values, ranks, ae, scale, phase3, exchange, config,
                key, bucket, k)
        with tf.device(group.reduce_device):
            loss = self._maybe_train(ae, training, data, k)
            sparse = fusion_ops.scatter_sum(positions, tf.cast(total, bucket.dtype), n)
        rests = [[prep.rest] for prep in prepared]
        if bucket.dense_n:
            (rest,) = yield Sum(rests)
            out = tf.concat([sparse, rest], 0)
        else:
            out = sparse
        outcomes, gots = [], []
        for i, (device, x, rank) in enumerate(zip(group.devices, xs, ranks)):
            with tf.device(device):
                contribution = tf.cast(mine[i], bucket.dtype)
                rest_bytes = tf.size(rests[i][0], out_type=tf.int64) * bucket.dtype.size
                nbytes = tf.size(sent_a[i], out_type=tf.int64) + sent_b[i] + rest_bytes
                got = (everyone_a - tf.size(sent_a[i], out_type=tf.int64) + received_b[i]
                       + ring_received(rest_bytes, R))
                if rank == 0:
                    nbytes += sync_bytes
                else:
                    got += sync_bytes
                outcomes.append(Outcome(Sent(x, positions, contribution), None,
                                        bucket_record(bucket, nbytes)))
                gots.append(got)
        return guarded(out, loss), outcomes, gots

    # ------------------------------------------------------------ pieces
    def _sync_weights(self, group, ranks, ae, first3, config, key):
        """At the first compressed exchange, replica 0's weights replace
        everyone's (so that the frozen autoencoder is the same everywhere).
        A Branch whose result is the bytes replica 0 sent (0 on other
        exchanges)."""
        count = ae.num_weights()

        def sync():
            payloads = []
            for device, rank in zip(group.devices, ranks):
                with tf.device(device):
                    if rank == 0:
                        raw = tf.reshape(tf.bitcast(ae.flat_weights(), tf.uint8), [-1])
                        payloads.append(payload_ops.pack([raw], [count, config],
                                                         kind=KIND_WEIGHTS))
                    else:
                        payloads.append(tf.zeros([0], tf.uint8))
            got = yield Gather(payloads, f"lgc/W/{key}")
            with tf.device(group.reduce_device):
                _, (raw,) = payload_ops.unpack(got[0], 1, len(WEIGHT_FIELDS), kind=KIND_WEIGHTS,
                                               field_names=WEIGHT_FIELDS,
                                               expected={"count": count, "config": config})
                raw = guarded(raw, check(tf.equal(tf.size(raw), 4 * count),
                                         f"{self.name}: weight broadcast of the wrong length"))
                flat = tf.bitcast(tf.reshape(raw, [count, 4]), tf.float32)
                ops = ae.assign_flat(flat)
                nbytes = tf.size(got[0], out_type=tf.int64)
                return guarded(nbytes, *ops)

        return Branch(first3, sync, lambda: tf.constant(0, tf.int64))

    def _maybe_train(self, ae, training, data, k):
        finite = tf.reduce_all(tf.math.is_finite(data))

        def train():
            return ae.train_step(lambda: self.loss(ae, data, k))

        return tf.cond(tf.logical_and(training, finite), train, lambda: tf.constant(0.0))


class LgcPS(_Lgc):
    """LGC, parameter-server variant (see the module docstring)."""

    name = "lgc_ps"
    travels = ("gathered bytes: the leader's positions and scale, then per replica its values "
               "(phases 1-2) or the leader's latent and every replica's innovation (phase 3); "
               "the dense sections summed")
    default_activation = "leaky_relu"
    per_node_decoders = True

    def loss(self, ae, data, k):
        """data [R, k]: every node's values / s. 0.5 mean_i MSE(v_i, v^_i) +
        0.5 mean_{i != j} MSE(z_i, z_j), v^_i decoded from the leader's latent
        with node i's innovation written over it."""
        z = ae.encode(data)
        recon = self.reconstruct(ae, data, k, z)
        rec = tf.reduce_mean(tf.square(recon - data))
        R = ae.num_decoders
        if R > 1:
            diff = tf.expand_dims(z, 0) - tf.expand_dims(z, 1)  # [R, R, latent]
            pull = tf.reduce_sum(tf.reduce_mean(tf.square(diff), -1)) / (R * (R - 1))
        else:
            pull = tf.constant(0.0)
        return 0.5 * rec + 0.5 * pull

    def reconstruct(self, ae, data, k, z=None):
        """What the receivers decode of every node, data [R, k] (values / s)
        -> [R, k]: the leader's latent through node i's decoder, node i's
        innovation written over it (phase 3 without the value codecs)."""
        z = ae.encode(data) if z is None else z
        recon = []
        for i in range(ae.num_decoders):
            own = ae.decode(z[i:i + 1], k, i)[0]
            mask = self._innovation_mask(data[i], own, k)
            recon.append(tf.where(mask, data[i], self.guess(ae, z[self.leader], k, i)))
        return tf.stack(recon)

    def guess(self, ae, z_leader, k, node):
        """Node `node`'s values / s as decoded from the leader's latent."""
        return ae.decode(tf.expand_dims(z_leader, 0), k, node)[0]

    def _innovation_count(self, k):
        return int(sparsify_ops.k_for_ratio(k, self.innovation))

    def _innovation_mask(self, v, recon, k):
        m = self._innovation_count(k)
        _, idx = tf.math.top_k(tf.abs(v - recon), m)
        return fusion_ops.scatter_sum(tf.cast(idx, tf.int64), tf.ones([m], tf.float32), k) > 0

    def _round_b(self, group, exs, values, ranks, ae, scale, phase3, exchange,
                 config, key, bucket, k):
        R = group.num_replicas
        helpers = [self._helpers(c, k) for c in exs]
        lat_n = latent_length(k, ae.latent_channels)

        def pack(parts, phase):
            meta = tf.stack([exchange, tf.constant(phase, tf.int64), tf.constant(config, tf.int64)])
            return payload_ops.pack(parts, meta, kind=KIND_VALUES)

        def unpack(payload, phase):
            meta, parts = payload_ops.unpack(payload, 2, len(VALUE_FIELDS), kind=KIND_VALUES,
                                             field_names=VALUE_FIELDS,
                                             expected={"phase": phase, "config": config})
            same = check(tf.equal(meta[0], exchange), f"{self.name}: phase mismatch between "
                         "workers: a payload of another exchange number")
            return [guarded(part, same) for part in parts]

        def early():
            payloads, ctx = [], None
            for h, device, v in zip(helpers, group.devices, values):
                with tf.device(device):
                    p, c = h.values.compress(tf.cast(v, tf.float32), f"lgc/{key}/values")
                    payloads.append(pack([p, tf.zeros([0], tf.uint8)], 1))
                    ctx = ctx or c
            got = yield Gather(payloads, f"lgc/B1/{key}")
            with tf.device(group.reduce_device):
                decoded = [helpers[0].values.decompress(unpack(p, 1)[0], ctx) for p in got]
                data = tf.stack(decoded) / scale
            return decoded, payloads, got, data

        def late():
            payloads, lctx, ictx = [], None, None
            for h, device, v, rank in zip(helpers, group.devices, values, ranks):
                with tf.device(device):
                    u = tf.cast(v, tf.float32) / scale
                    z = ae.encode(tf.expand_dims(u, 0))
                    own = ae.decode(z, k, rank)[0]
                    mask = self._innovation_mask(u, own, k)
                    innov = tf.where(mask, tf.cast(v, tf.float32), 0.0)
                    ip, ictx_ = h.innovation.compress(innov, f"lgc/{key}/innovation")
                    ictx = ictx or ictx_
                    if rank == self.leader:
                        lp, lctx_ = h.values.compress(z[0], f"lgc/{key}/latent")
                        lctx = lctx_
                    else:
                        lp = tf.zeros([0], tf.uint8)
                    payloads.append(pack([lp, ip], 3))
            if lctx is None:  # the leader is in another process
                lctx = helpers[0].values.receiver_context(f"lgc/{key}/latent", [lat_n],
                                                          tf.float32)
            got = yield Gather(payloads, f"lgc/B3/{key}")
            with tf.device(group.reduce_device):
                parts = [unpack(p, 3) for p in got]
                z_leader = helpers[0].values.decompress(parts[self.leader][0], lctx)
                decoded = []
                for j in range(R):
                    u = helpers[0].innovation.decompress(parts[j][1], ictx)
                    guess = self.guess(ae, z_leader, k, j) * scale
                    decoded.append(tf.where(tf.not_equal(u, 0.0), u, guess))
            return decoded, payloads, got, tf.zeros([R, k])

        def measured(fn):
            def branch():
                decoded, payloads, got, data = yield from fn()
                sizes = [tf.size(p, out_type=tf.int64) for p in payloads]
                everyone = tf.add_n([tf.size(p, out_type=tf.int64) for p in got])
                return tf.stack(decoded), tf.stack(sizes), everyone - tf.stack(sizes), data
            return branch

        decoded, sizes, received, data = yield Branch(phase3, measured(late), measured(early))
        with tf.device(group.reduce_device):
            total = ordered_sum(tf.unstack(decoded))
        mine = [decoded[r] for r in ranks]
        return total, mine, tf.unstack(sizes), tf.unstack(received), data


class LgcRAR(_Lgc):
    """LGC, ring-all-reduce variant (see the module docstring)."""

    name = "lgc_rar"
    travels = ("gathered bytes, then summed vectors: the leader's positions and scale, then per "
               "replica its values (phases 1-2) or the sum of the latents (phase 3); the dense "
               "sections summed")
    default_activation = "linear"

    def _check_values(self, ex):
        vc = ex.value_codec
        if vc.name not in SUMMABLE_WIRE_DTYPES:
            return [f"latents are summed by an all-reduce, so the value codec must be additive "
                    f"(raw, fp16 or bf16), got {vc.name!r}"]
        return []

    def loss(self, ae, data, k):
        """data [1, k]: the sum of the nodes' values / s; the linear
        autoencoder learns to reproduce sums."""
        return tf.reduce_mean(tf.square(ae.decode(ae.encode(data), k, 0) - data))

    def _round_b(self, group, exs, values, ranks, ae, scale, phase3, exchange,
                 config, key, bucket, k):
        wire = exs[0].compressor.wire_dtype(tf.float32)

        def early():
            sent = [tf.cast(tf.cast(v, tf.float32), wire) for v in values]
            (total,) = yield Sum([[s] for s in sent])
            mine = [tf.cast(s, tf.float32) for s in sent]
            with tf.device(group.reduce_device):
                total = tf.cast(total, tf.float32)
                data = tf.expand_dims(total / scale, 0)
            sizes = [tf.size(s, out_type=tf.int64) * s.dtype.size for s in sent]
            return total, tf.stack(mine), tf.stack(sizes), data

        def late():
            sent, mine = [], []
            for device, v in zip(group.devices, values):
                with tf.device(device):
                    z = ae.encode(tf.expand_dims(tf.cast(v, tf.float32) / scale, 0))
                    w = tf.cast(z[0], wire)
                    sent.append(w)
                    mine.append(ae.decode(tf.expand_dims(tf.cast(w, tf.float32), 0), k, 0)[0]
                                * scale)
            (zsum,) = yield Sum([[s] for s in sent])
            with tf.device(group.reduce_device):
                total = ae.decode(tf.expand_dims(tf.cast(zsum, tf.float32), 0), k, 0)[0] * scale
            sizes = [tf.size(s, out_type=tf.int64) * s.dtype.size for s in sent]
            return total, tf.stack(mine), tf.stack(sizes), tf.zeros([1, k])

        total, mine, sizes, data = yield Branch(phase3, late, early)
        r = group.num_replicas
        received = [ring_received(s_, r) for s_ in tf.unstack(sizes)]
        return total, tf.unstack(mine), tf.unstack(sizes), received, data

