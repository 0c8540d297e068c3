"""PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019): low-rank factors that
all-reduce.

Per gradient matrix M (a tensor of rank >= 2 viewed as n x m: a conv kernel
[h, w, in, out] as [h*w*in, out]), with error feedback E and a persistent Q
(m x r), as PyTorch's powerSGD_hook does it:

    M <- M + E                      (Exchange.prepare: the residual memory)
    P = M Q;  all-reduce P (sum);   P <- orthogonalise(P)   (Gram-Schmidt)
    Q = M^T P;  all-reduce Q;       Q <- Q / W   (the mean)
    M^ = P Q^T   (the mean of the workers' approximations; the step's sum is
                  W M^ = P (sum Q)^T)
    E <- M - M^;  keep Q for the next step (warm start)

Tensors where (n + m) r >= n m / min_compression_rate, and every vector
(biases, normalisation), are summed uncompressed, in ONE all-reduce with the
buckets' dense sections. The first `start_iter` steps all-reduce everything
uncompressed. So a step runs at most three collectives: the uncompressed
tensors, every P, every Q (each fused across tensors into one vector; one
collective per dtype of the uncompressed tensors).

Every worker decides alike: the uncompressed all-reduce carries one more
element, the number of workers whose compensated gradient holds NaN or Inf;
when it is not 0 (or in the first start_iter steps) the matrices travel
uncompressed as well, the sum shows the overflow to loss scaling, and no
worker's memory or Q changes (one bad step must not poison later ones).
Orthogonalisation runs on the summed P, the same bits everywhere: replicas
and workers stay bit-identical. Factors are computed and travel in float32
(float16 / bfloat16 gradients included).
"""

import numpy as np
import tensorflow as tf

from deepreduce_tf._checks import guarded
from deepreduce_tf._variables import StateVar, ensure_initialized, state_scope
from deepreduce_tf.accounting import ring_received
from deepreduce_tf.codecs.base import Param
from deepreduce_tf.compressor import _key_seed, bucket_record
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.endpoint import Outcome
from deepreduce_tf.exchange.rounds import Branch, Replicate, Sum
from deepreduce_tf.memory import Sent


def _rate_ok(value):
    if not np.isfinite(float(value)):
        raise ValueError(f"min_compression_rate must be a finite number >= 1, got {value!r}")


PARAMS = (
    Param("rank", int, 1, low=1, aliases=("compress_rank",),
          help="powersgd: rank r of the factors P (n x r) and Q (m x r)"),
    Param("start_iter", int, 0, low=0,
          help="powersgd: the first start_iter steps all-reduce uncompressed"),
    Param("min_compression_rate", float, 2.0, low=1, check=_rate_ok,
          help="powersgd: compress an n x m tensor only if n m / ((n + m) r) exceeds this"),
    Param("warm_start", bool, True,
          help="powersgd: reuse last step's Q (else a fresh seeded Q every step)"),
)


def matrix_shape(shape):
    """(n, m) of a tensor of rank >= 2 viewed as a matrix: all dimensions but
    the last, the last (TensorFlow's kernels keep the output dimension last)."""
    dims = [int(d) for d in shape]
    return int(np.prod(dims[:-1])), dims[-1]


def compresses(shape, rank, min_compression_rate):
    """True if PowerSGD sends the tensor of this shape as factors."""
    if len(shape) < 2:
        return False
    n, m = matrix_shape(shape)
    return (n + m) * rank * min_compression_rate < n * m


def orthogonalize(p):
    """Gram-Schmidt on the columns of p [n, r] (float32): orthonormal columns,
    a zero column stays zero (no NaN from a zero gradient)."""
    cols = tf.unstack(p, axis=1)
    out = []
    for i, col in enumerate(cols):
        col = tf.math.divide_no_nan(col, tf.norm(col))
        out.append(col)
        for j in range(i + 1, len(cols)):
            cols[j] = cols[j] - tf.reduce_sum(col * cols[j]) * col
    return tf.stack(out, axis=1)


class PowerSGD(Communicator):
    """Low-rank compression whose factors all-reduce (module docstring)."""

    name = "powersgd"
    travels = ("rounds of summed vectors: the uncompressed tensors and a non-finite flag, then "
               "the factors P, then the factors Q")
    additive = True
    collectives = ("sum",)
    PARAMS = PARAMS

    def __init__(self, rank=1, start_iter=0, min_compression_rate=2.0, warm_start=True, seed=0):
        for param, value in zip(PARAMS, (rank, start_iter, min_compression_rate, warm_start)):
            param.validate(value)
        self.rank = int(rank)
        self.start_iter = int(start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.warm_start = bool(warm_start)
        self.seed = int(seed)

    def config(self):
        return {"rank": self.rank, "start_iter": self.start_iter,
                "min_compression_rate": self.min_compression_rate,
                "warm_start": self.warm_start}

    def __repr__(self):
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"PowerSGD({cfg})"

    def check(self, exchange):
        problems = []
        if not exchange.sparsifier.dense:
            problems.append(f"it compresses whole gradients, but the compressor is "
                            f"{exchange.sparsifier.name!r} (use compressor='powersgd')")
        if exchange.index_codec.name != "raw" or exchange.value_codec.name != "raw":
            problems.append("its factors travel as float32 values, without index or value "
                            "codecs (leave deepreduce unset)")
        if exchange.warmup_steps:
            problems.append("warmup_steps is the all-gather exchange's (PowerSGD's own warm-up "
                            "is start_iter)")
        if problems:
            raise ValueError("communicator 'powersgd': " + "; ".join(problems))

    def counts(self, exchange):
        return True, False  # the step's counters (start_iter); no seed

    # ------------------------------------------------------------ state
    def state_vars(self):
        if not self.warm_start:
            return ()
        return (StateVar("powersgd_q", "float32", "[m, rank]", "matrix"),)

    def make_state(self, exchange):
        if not self.warm_start:
            return None
        state = tf.Module(name="powersgd")
        state.q = {}
        return state

    def _initial_q(self, key, m, step=None):
        """A Q drawn from a seed every worker shares: the key's (warm start:
        once), or the key's and the step's (without warm start: every step)."""
        step = tf.constant(0, tf.int64) if step is None else step
        seed = tf.stack([tf.constant(_key_seed(key, self.seed), tf.int64), step])
        return tf.random.stateless_normal([m, self.rank], seed=seed, dtype=tf.float32)

    def _q_var(self, exchange, state, key, m):
        var = state.q.get(key)
        if var is None:
            with state_scope():
                var = exchange.variable_factory(self._initial_q(key, m), "powersgd_q")
            state.q[key] = var
        return var

    # ------------------------------------------------------------ layout
    def _layout(self, plan):
        """Per bucket, per sparse member: (offset, length, (n, m) or None)."""
        layout, any_matrix, any_compressed = [], False, False
        for bucket in plan.buckets:
            members = []
            for j, member in enumerate(bucket.members[:len(bucket.lengths)]):
                start, length = int(bucket.offsets[j]), int(bucket.lengths[j])
                nm = None
                if len(member.shape) >= 2:
                    any_matrix = any_matrix or compresses(member.shape, 1,
                                                          self.min_compression_rate)
                    if compresses(member.shape, self.rank, self.min_compression_rate):
                        nm = matrix_shape(member.shape)
                        any_compressed = True
                members.append((member.key, start, length, nm))
            layout.append(members)
        if any_matrix and not any_compressed:
            best = max((max_rank(m.shape, self.min_compression_rate)
                        for b in plan.buckets for m in b.members if len(m.shape) >= 2),
                       default=0)
            raise ValueError(
                f"powersgd: rank {self.rank} is larger than every tensor of this model allows "
                f"(an n x m tensor is compressed only if (n + m) * rank * "
                f"min_compression_rate < n * m): use rank <= {best}, or a smaller "
                "min_compression_rate")
        return layout

    # ------------------------------------------------------------ the step
    def rounds(self, group, exchanges, plan, prepared, keys):
        layout = self._layout(plan)
        states = [ex.communicator_state for ex in exchanges]
        # The step's counters (Exchange.prepare), the same on every replica.
        steps = [p.step for p in prepared[0] if p.step is not None]
        step = steps[0] if steps else tf.constant(0, tf.int64)

        # Per replica: its compensated members, and whether any is not finite.
        xs, flags, raw = [], [], []
        for ex, device, preps in zip(exchanges, group.devices, prepared):
            with tf.device(device):
                mine, bad_here = [], []
                for bucket, prep in zip(plan.buckets, preps):
                    if not bucket.sparse_n:
                        mine.append(None)
                        continue
                    mine.append(prep.x)
                    if prep.nonfinite is not None:  # the step's rule (Exchange.prepare)
                        bad_here.append(prep.nonfinite)
                bad = tf.reduce_any(tf.stack(bad_here)) if bad_here else tf.constant(False)
                flags.append(tf.reshape(tf.cast(bad, tf.float32), [1]))
                xs.append(mine)
                raw.append([p.rest for p in preps])

        def segments(d, compressed):
            out = []
            for b, members in enumerate(layout):
                for key, start, length, nm in members:
                    if (nm is not None) == compressed:
                        out.append(xs[d][b][start:start + length])
            return out

        # Collective 1: the dense sections, the uncompressed members, the flag.
        entries = [("dense", b) for b, bucket in enumerate(plan.buckets) if bucket.dense_n]
        entries += [("member", (b, start, length)) for b, members in enumerate(layout)
                    for _, start, length, nm in members if nm is None and length]
        plain = []
        for d in range(len(exchanges)):
            vecs = [raw[d][where] if kind == "dense"
                    else xs[d][where[0]][where[1]:where[1] + where[2]]
                    for kind, where in entries]
            plain.append(vecs + [flags[d]])
        summed = yield Sum(plain)
        with tf.device(group.reduce_device):
            any_bad = summed[-1][0] > 0
            uncompressed = tf.logical_or(step <= self.start_iter, any_bad)
        plain_sums = dict(zip(entries, summed[:-1]))
        matrices = [segments(d, True) for d in range(len(exchanges))]
        factors = None
        if matrices[0]:
            def dense():
                sums = yield Sum(matrices)
                return sums, [[tf.zeros_like(v) for v in mats] for mats in matrices]

            def low_rank():
                return self._low_rank(group, exchanges, states, layout, matrices, step)

            factors = yield Branch(uncompressed, dense, low_rank)
        return self._assemble(group, exchanges, plan, layout, plain_sums, factors,
                              uncompressed, any_bad, keys)

    def _low_rank(self, group, exchanges, states, layout, matrices, step):
        """Rounds: P, then Q, all-reduced; returns (the sums of the compressed
        members, per replica the residual of each: M - M^)."""
        R = group.num_replicas
        shapes = [nm for members in layout for (_, _, _, nm) in members if nm is not None]
        mkeys = [key for members in layout for (key, _, _, nm) in members if nm is not None]
        ms, qs, ps = [], [], []
        for ex, state, device, mats in zip(exchanges, states, group.devices, matrices):
            with tf.device(device):
                mine_m, mine_q, mine_p = [], [], []
                for key, (n, m), flat in zip(mkeys, shapes, mats):
                    mat = tf.reshape(tf.cast(flat, tf.float32), [n, m])
                    if self.warm_start:
                        q = self._q_var(ex, state, key, m)
                        with tf.control_dependencies(ensure_initialized([q])):
                            q = q.read_value()
                    else:
                        q = self._initial_q(key, m, step)
                    mine_m.append(mat)
                    mine_q.append(q)
                    mine_p.append(tf.reshape(tf.matmul(mat, q), [-1]))
                ms.append(mine_m)
                qs.append(mine_q)
                ps.append([tf.concat(mine_p, 0)])
        (p_sum,) = yield Sum(ps)
        with tf.device(group.reduce_device):
            sizes = [n * self.rank for n, _ in shapes]
            p_hat = [orthogonalize(tf.reshape(p, [n, self.rank]))
                     for p, (n, _) in zip(tf.split(p_sum, sizes), shapes)]
        p_copies = []  # [matrix][device]
        for p in p_hat:
            p_copies.append((yield Replicate(p)))
        q_local = []
        for d, (device, mine_m) in enumerate(zip(group.devices, ms)):
            with tf.device(device):
                q_local.append([tf.concat([tf.reshape(tf.matmul(mat, p_copies[i][d],
                                                                transpose_a=True), [-1])
                                           for i, mat in enumerate(mine_m)], 0)])
        (q_sum,) = yield Sum(q_local)
        with tf.device(group.reduce_device):
            q_sizes = [m * self.rank for _, m in shapes]
            q_sums = [tf.reshape(q, [m, self.rank])
                      for q, (_, m) in zip(tf.split(q_sum, q_sizes), shapes)]
            sums = [tf.reshape(tf.matmul(p, q, transpose_b=True), [-1])
                    for p, q in zip(p_hat, q_sums)]
            q_mean = [q / R for q in q_sums]
            mean = [s / R for s in sums]
        mean_copies, q_copies = [], []
        for v in mean:
            mean_copies.append((yield Replicate(v)))
        for q in q_mean:
            q_copies.append((yield Replicate(q)))
        residuals, updates = [], []
        for d, (ex, state, device) in enumerate(zip(exchanges, states, group.devices)):
            with tf.device(device):
                mine = []
                for i, (key, flat) in enumerate(zip(mkeys, matrices[d])):
                    mine.append(tf.cast(flat, tf.float32) - mean_copies[i][d])
                    if self.warm_start:
                        updates.append(self._q_var(ex, state, key, shapes[i][1]).assign(
                            q_copies[i][d], read_value=False))
                residuals.append([tf.cast(r, flat.dtype) for r, flat in zip(mine, matrices[d])])
        updates = [u for u in updates if u is not None]
        if updates:
            sums = [guarded(s, *updates) for s in sums]
        return [tf.cast(s, flat.dtype) for s, flat in zip(sums, matrices[0])], residuals

    def _assemble(self, group, exchanges, plan, layout, plain_sums, factors, uncompressed,
                  any_bad, keys):
        """The summed buckets, and per replica and bucket its Outcome."""
        R = group.num_replicas
        matrix_sums = iter(factors[0]) if factors is not None else iter(())
        sums = []
        with tf.device(group.reduce_device):
            for b, bucket in enumerate(plan.buckets):
                parts = []
                for _, start, length, nm in layout[b]:
                    if not length:
                        continue
                    parts.append(next(matrix_sums) if nm is not None
                                 else plain_sums[("member", (b, start, length))])
                if bucket.dense_n:
                    parts.append(plain_sums[("dense", b)])
                flat = (tf.concat(parts, 0) if len(parts) > 1
                        else parts[0] if parts else tf.zeros([0], bucket.dtype))
                sums.append(flat)
        outcomes, sent_bytes = [], []
        rank = self.rank
        for d, (ex, device) in enumerate(zip(exchanges, group.devices)):
            with tf.device(device):
                residuals = iter(factors[1][d]) if factors is not None else iter(())
                outs = []
                for b, bucket in enumerate(plan.buckets):
                    size = bucket.dtype.size
                    low = full = bucket.dense_n * size
                    parts = []
                    for _, _, length, nm in layout[b]:
                        full += length * size
                        if nm is None:
                            low += length * size
                            parts.append(tf.zeros([length], bucket.dtype))
                        else:
                            low += 4 * (nm[0] + nm[1]) * rank
                            parts.append(next(residuals))
                    nbytes = tf.where(uncompressed, tf.constant(full, tf.int64),
                                      tf.constant(low, tf.int64))
                    ctx = bucket_record(bucket, nbytes)
                    if not bucket.sparse_n:
                        outs.append(Outcome(None, None, ctx))
                        continue
                    rest = tf.concat(parts, 0) if len(parts) > 1 else parts[0]
                    none = (tf.zeros([0], tf.int64), tf.zeros([0], bucket.dtype))
                    # A step sent uncompressed leaves nothing behind; a step
                    # with NaN/Inf anywhere leaves every residual as it was.
                    outs.append(Outcome(Sent(rest, *none), any_bad, ctx))
                outcomes.append(outs)
                sent_bytes.append(tf.add_n([o.ctx.payload_bytes for o in outs]) + 4)
        key = "powersgd/" + "|".join(keys)
        received = [[(key, ring_received(s, R))] for s in sent_bytes]
        return Transfer(sums, outcomes, [[("(powersgd flag)", 4)] for _ in exchanges], received)


def max_rank(shape, min_compression_rate):
    """The largest rank at which a tensor of this shape is compressed (0: none)."""
    if len(shape) < 2:
        return 0
    n, m = matrix_shape(shape)
    r = int((n * m) // ((n + m) * min_compression_rate))
    while r > 0 and not (n + m) * r * min_compression_rate < n * m:
        r -= 1
    return r
