"""Sparse all-reduce: top-k's selection, bytes per worker bounded in the number of workers.

The all-gather (exchange/allgather.py) delivers every worker's payload to
every worker: (W - 1) p bytes received. Here the W workers agree on ONE set
of positions per bucket, and only the values at those positions are
summed, by the transport's all-reduce. Per fused bucket and step:

  1  positions  every replica picks its own share of the bucket's top-k,
                top-(k / W) of its compensated gradient x_i (per variable
                or per bucket, as the sparsifier's scope says; the
                exponential warm-up's ratio divided the same way;
                compress_ratio 1 picks everything), codes
                the positions with the index codec (Golomb) and all-gathers
                them. A worker receives (W - 1) k / W positions, whatever W.
  2  the support  every replica decodes the W sets in replica order and
                takes their union U (<= k positions per bucket, plus at
                most W - 1 per variable where ceil rounds up): the same U,
                in the same order, everywhere.
  3  values     x_i at U in the value codec's summable wire dtype (raw,
                fp16, bf16) and the bucket's dense section (small tensors)
                are summed by ONE all-reduce: a ring delivers 2 (W - 1) / W
                of |U| values per worker. Value codec int8: integers on a
                scale the workers share, the largest max |x_i| of any
                replica (it travels with the positions, so no extra round):
                codes round(x_i / scale * L) with L = floor(127 / W), four
                to an int32 word; the sum of the words is the sum of the
                codes, exact and in 8 bits per lane by construction (THC's
                shared-scale integer sum): 1 byte per value at any W <= 127.

Per worker and step, on a ring: positions (W-1)/W k, values 2 (W-1)/W |U|:
what a worker receives at W = 8 is at most 1.75x what it receives at W = 2
(plus the few bits Golomb spends on sparser per-worker sets), where the
all-gather's grows 7x. This is the shared-support family of sparse
all-reduces (ScaleCom's cyclic leader, ARC-Top-k's shared sketch,
../shared/REFERENCE.md section 7) with every worker contributing its share
of the support at every step; docs/sparse_allreduce.md compares it with
the region-partitioned family (Ok-Topk).

Error feedback: replica i's residual is x_i outside U, plus the rounding of
the wire dtype (or of the int8 code) at U: everything it selected was sent (its picks are in U),
and the positions the others picked were sent too. memory 'dgc' masks the
momentum at U.

Dense steps: a step of the dense warm-up (warmup='dense'), or one where any
replica's compensated gradient holds NaN or Inf (nonfinite='dense', the
policy of every communicator), sums every position: U = all of them (in the
gradient's dtype under int8), so a NaN reaches every worker's result (the replica that held it keeps its
residual as it was, the step's rule in Exchange.commit).

Every positions payload names the step number and a fingerprint of the
bucket's layout, the density, the codecs and W: a peer with another model,
another density or another number of workers is an error that says so.
"""
import zlib

import tensorflow as tf

from deepreduce_tf._checks import check, guarded
from deepreduce_tf.accounting import ring_received
from deepreduce_tf.codecs.value import (int8_levels, int8_pack, int8_quantize, int8_step,
                                        int8_unpack)
from deepreduce_tf.compressor import SHARED_SCALE_CODECS, SUMMABLE_WIRE_DTYPES, bucket_record
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.endpoint import Outcome
from deepreduce_tf.exchange.rounds import GatherParts, Replicate, Sum
from deepreduce_tf.memory import Sent
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import payload as payload_ops

KIND_POSITIONS = 20  # the payload kind of round 1
FIELDS = ("step", "n", "k", "aux0", "aux1", "dense", "config")
SHARED_FIELDS = FIELDS + ("scale",)  # value codec int8: the replica's max |x| (float32 bits)
SUMMED_WITH = ", ".join(tuple(SUMMABLE_WIRE_DTYPES) + SHARED_SCALE_CODECS)


def _fingerprint(*parts):
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


class SparseAllreduce(Communicator):
    name = "sparse_allreduce"
    travels = ("gathered bytes, then summed vectors: every replica's top-(k/W) positions "
               "(index codec), then every replica's values at their union (summable wire "
               "dtype) and the dense sections, all-reduced")
    collectives = ("gather", "sum")

    def check(self, exchange):
        comp = exchange.compressor
        problems = []
        if comp.sparsifier.dense or comp.sparsifier.data_independent:
            problems.append(f"compressor {comp.sparsifier.name!r} picks the same positions on "
                            "every worker already (use communicator='allreduce')")
        vc = comp.value_codec
        if vc.name in SHARED_SCALE_CODECS:
            pass  # integers on the scale this exchange agrees
        elif not vc.additive:
            problems.append(f"value codec {vc.name!r} is not additive: the values are summed "
                            f"by the all-reduce (use {SUMMED_WITH})")
        elif vc.name not in SUMMABLE_WIRE_DTYPES:
            problems.append(f"value codec {vc.name!r} has no wire dtype here "
                            f"(use {SUMMED_WITH})")
        if problems:
            raise ValueError("communicator 'sparse_allreduce' sums every worker's values at "
                             "the union of their top-k positions, but " + "; ".join(problems))

    def counts(self, exchange):
        # The step number travels in every positions payload (a peer at
        # another step is refused), so every sparse bucket counts steps.
        return True, exchange.counts()[1]

    # ------------------------------------------------------------ round 1
    @staticmethod
    def _select(comp, x, bucket, prep, R):
        """Replica's own share of the support: int64 positions."""
        sp = comp.sparsifier
        if not hasattr(sp, "select_ratio"):  # threshold (element-wise): its own picks
            return tf.cast(sp.select_segments(x, bucket.lengths, prep.seed), tf.int64)
        # compress_ratio 1 sends everything (lossless): every worker picks all.
        share = 1 if sp.compress_ratio >= 1 else R
        ratio = tf.constant(sp.compress_ratio / share, tf.float64)
        if prep.warmup is not None and prep.warmup[1] is not None:
            in_warmup, warm = prep.warmup
            ratio = tf.where(in_warmup, tf.cast(warm, tf.float64) / R, ratio)
        return tf.cast(sp.select_ratio(x, bucket.lengths, ratio), tf.int64)

    def _config(self, comp, bucket, R):
        sp = comp.sparsifier
        return _fingerprint(self.name, bucket.key, tuple(bucket.lengths), bucket.sparse_n,
                            sorted(sp.config().items()), sp.name, R,
                            comp.index_codec.codec_id, comp.value_codec.codec_id)

    def _positions_payload(self, comp, bucket, prep, R, config, shared):
        """The replica's positions, coded, whether its step must be dense
        (dense warm-up, or x holds NaN/Inf) and, when `shared` (int8), its
        max |x| (0 on a dense step), all in one payload."""
        n = bucket.sparse_n
        reasons = []
        if prep.warmup is not None and prep.warmup[1] is None:
            reasons.append(prep.warmup[0])
        if prep.nonfinite is not None:
            reasons.append(prep.nonfinite)
        with tf.control_dependencies(prep.deps):
            if not reasons:
                dense = tf.constant(False)
                idx = self._select(comp, prep.x, bucket, prep, R)
            else:
                # A dense step sends no positions (all of them are in U).
                dense = tf.reduce_any(tf.stack(reasons))
                idx = tf.cond(dense, lambda: tf.zeros([0], tf.int64),
                              lambda: self._select(comp, prep.x, bucket, prep, R))
        enc = comp.index_codec.encode(idx, n)
        meta = tf.stack([tf.cast(prep.step, tf.int64), tf.constant(n, tf.int64),
                         tf.size(idx, out_type=tf.int64), tf.cast(enc.aux[0], tf.int64),
                         tf.cast(enc.aux[1], tf.int64), tf.cast(dense, tf.int64),
                         tf.constant(config, tf.int64)])
        if shared:
            # The largest |x| of the whole sparse section bounds x at any
            # position of U (a threshold's or warm-up's picks included).
            peak = tf.reduce_max(tf.concat([tf.abs(tf.cast(prep.x, tf.float32)),
                                            tf.zeros([1], tf.float32)], 0))
            peak = tf.where(dense, tf.constant(0.0), peak)
            meta = tf.concat([meta, [tf.cast(tf.bitcast(peak, tf.int32), tf.int64)]], 0)
        return payload_ops.pack([enc.section], meta, kind=KIND_POSITIONS)

    def _support(self, comp, bucket, received, step, config, shared):
        """The gathered positions payloads -> (U, (|U|, k), (scale, dense)):
        the union in replica order (the same on every replica), every
        position on a dense step; the shared scale (int8: the replicas'
        largest max |x|, else 0) and whether the step is dense (0 or 1),
        float32."""
        n = bucket.sparse_n
        fields = SHARED_FIELDS if shared else FIELDS
        parts, dense, peaks = [], [], []
        for r, payload in enumerate(received):
            meta, (section,) = payload_ops.unpack(payload, 1, len(fields), kind=KIND_POSITIONS,
                                                  field_names=fields)
            same = check(tf.logical_and(tf.equal(meta[1], n), tf.equal(meta[6], config)),
                         f"{self.name}: replica {r}'s positions of bucket {bucket.key!r} were "
                         "made for another layout, density, codec or number of workers; every "
                         "worker must run the same model and configuration")
            at_step = check(tf.equal(meta[0], step),
                            f"{self.name}: replica {r} is at another step of bucket "
                            f"{bucket.key!r} (workers restored from different checkpoints, or "
                            "one skipped a step); restart them from one checkpoint")
            k = guarded(meta[2], same, at_step)
            positions = comp.index_codec.decode(section, n, k, (meta[3], meta[4]))
            parts.append(tf.reshape(tf.cast(positions, tf.int64), [-1]))
            dense.append(meta[5] > 0)
            if shared:
                peak = tf.bitcast(tf.cast(meta[7], tf.int32), tf.float32)
                peaks.append(guarded(peak, check(
                    tf.logical_and(tf.math.is_finite(peak), peak >= 0),
                    f"{self.name}: replica {r}'s int8 scale of bucket {bucket.key!r} is "
                    "negative or not finite (a corrupted payload)")))
        any_dense = tf.reduce_any(tf.stack(dense))
        scale = tf.reduce_max(tf.stack(peaks)) if shared else tf.constant(0.0)
        info = tf.stack([scale, tf.cast(any_dense, tf.float32)])
        union = tf.unique(tf.concat(parts, 0), out_idx=tf.int64)[0]
        # |U| and k (the positions the replicas picked) for the accounting:
        # 0, 0 on a dense step
        picks = tf.add_n([tf.size(p, out_type=tf.int64) for p in parts])
        size = (tf.where(any_dense, tf.constant(0, tf.int64), tf.size(union, out_type=tf.int64)),
                tf.where(any_dense, tf.constant(0, tf.int64), picks))
        return tf.cond(any_dense, lambda: tf.range(n, dtype=tf.int64), lambda: union), size, info

    # ------------------------------------------------------------ the step
    def rounds(self, group, exchanges, plan, prepared, keys):
        R = group.num_replicas
        head = exchanges[0].compressor
        shared = head.value_codec.name in SHARED_SCALE_CODECS
        levels = int8_levels(R) if shared else None
        sparse = [b for b, bucket in enumerate(plan.buckets) if bucket.sparse_n]
        configs = {b: self._config(head, plan.buckets[b], R) for b in sparse}
        payloads = [[] for _ in exchanges]  # [replica][j]: j-th sparse bucket
        for r, (ex, device) in enumerate(zip(exchanges, group.devices)):
            with tf.device(device):
                for b in sparse:
                    # Each replica names its own configuration; the receivers
                    # compare it with theirs.
                    payloads[r].append(self._positions_payload(
                        ex.compressor, plan.buckets[b], prepared[r][b], R,
                        self._config(ex.compressor, plan.buckets[b], R), shared))
        supports, infos, support_sizes = {}, {}, []
        if sparse:
            key = "sparse_allreduce/" + "|".join(keys)
            received = yield GatherParts(payloads, key)  # received[j][r]
            with tf.device(group.reduce_device):
                for j, b in enumerate(sparse):
                    supports[b], size, infos[b] = self._support(
                        head, plan.buckets[b], received[j], prepared[0][b].step, configs[b],
                        shared)
                    support_sizes.append(size)
                gathered = [[self.gathered(received[j], [p[j] for p in payloads])[r]
                             for j in range(len(sparse))] for r in range(len(exchanges))]
            copies, info_copies = {}, {}
            for b in sparse:
                copies[b] = yield Replicate(supports[b])
                if shared:
                    info_copies[b] = yield Replicate(infos[b])
        # Round 2: the values at U and the dense sections, one all-reduce.
        # Per bucket, its vectors: [values (int8: words, then the dense
        # step's floats)], then the dense section.
        vectors, contributions, slots = [], [], []
        for r, (ex, device) in enumerate(zip(exchanges, group.devices)):
            with tf.device(device):
                mine, contrib = [], {}
                for b, (bucket, prep) in enumerate(zip(plan.buckets, prepared[r])):
                    if r == 0:
                        slots.append(len(mine))
                    if not bucket.sparse_n:
                        wires = [tf.zeros([0], bucket.dtype)]
                    else:
                        with tf.control_dependencies(prep.deps):
                            at_u = fusion_ops.gather(prep.x, copies[b][r])
                        if shared:
                            wires, contrib[b] = self._int8_wires(
                                at_u, info_copies[b][r], levels, bucket.dtype)
                        else:
                            wire = tf.cast(at_u, ex.compressor.wire_dtype(bucket.dtype))
                            wires, contrib[b] = [wire], tf.cast(wire, bucket.dtype)
                    mine += wires + [prep.rest]
            vectors.append(mine)
            contributions.append(contrib)
        slots.append(len(vectors[0]))
        summed = yield Sum(vectors)
        sums = []
        with tf.device(group.reduce_device):
            for b, bucket in enumerate(plan.buckets):
                parts = summed[slots[b]:slots[b + 1]]
                rest = parts[-1]
                if bucket.sparse_n:
                    if shared:
                        values = self._int8_sum(parts[0], parts[1], infos[b], levels,
                                                tf.size(supports[b]), bucket.dtype)
                    else:
                        values = tf.cast(parts[0], bucket.dtype)
                    out = fusion_ops.scatter_sum(supports[b], values, bucket.sparse_n)
                    out = tf.concat([out, rest], 0) if bucket.dense_n else out
                else:
                    out = rest
                sums.append(out)
        outcomes, received_bytes = [], []
        for r, (device, preps) in enumerate(zip(group.devices, prepared)):
            with tf.device(device):
                outs, got = [], []
                for b, (bucket, prep) in enumerate(zip(plan.buckets, preps)):
                    vecs = vectors[r][slots[b]:slots[b + 1]]
                    summed_bytes = tf.add_n([tf.size(v, out_type=tf.int64) * v.dtype.size
                                             for v in vecs])
                    got_b = ring_received(summed_bytes, R)
                    sent_b = summed_bytes
                    sent = None
                    if bucket.sparse_n:
                        j = sparse.index(b)
                        sent_b += tf.size(payloads[r][j], out_type=tf.int64)
                        got_b += gathered[r][j]
                        sent = Sent(prep.x, copies[b][r], contributions[r][b])
                    outs.append(Outcome(sent, None, bucket_record(bucket, sent_b)))
                    got.append(got_b)
                received_bytes.append([(f"{self.name}/" + "|".join(keys), tf.add_n(got))])
            outcomes.append(outs)
        support = None
        if support_sizes:
            with tf.device(group.reduce_device):
                support = (tf.add_n([u for u, _ in support_sizes]),
                           tf.add_n([k for _, k in support_sizes]))
        return Transfer(sums, outcomes, [[] for _ in exchanges], received_bytes, support)

    # ------------------------------------------------------------ int8 values
    @staticmethod
    def _int8_wires(at_u, info, levels, dtype):
        """A replica's values at U under int8 -> ([words, floats], what it
        contributed): its codes on the shared scale packed four to an int32
        word, or, on a dense step, its values in the gradient's dtype (a NaN
        travels)."""
        scale, dense = info[0], info[1] > 0
        codes = int8_quantize(at_u, scale, levels)
        step = int8_step(scale, levels)
        words = tf.cond(dense, lambda: tf.zeros([0], tf.int32), lambda: int8_pack(codes))
        floats = tf.cond(dense, lambda: tf.cast(at_u, dtype), lambda: tf.zeros([0], dtype))
        sent = tf.where(dense, tf.cast(at_u, dtype),
                        tf.cast(tf.cast(codes, tf.float32) * step, dtype))
        return [words, floats], sent

    @staticmethod
    def _int8_sum(words, floats, info, levels, count, dtype):
        """The summed values at U: the lane sums of the summed words times
        the shared step, or the summed floats of a dense step."""
        scale, dense = info[0], info[1] > 0
        step = int8_step(scale, levels)
        return tf.cond(dense, lambda: floats, lambda: tf.cast(
            tf.cast(int8_unpack(words, count), tf.float32) * step, dtype))
