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
                of |U| values per worker.

Per worker and step, on a ring: positions (W-1)/W k, values 2 (W-1)/W |U|:
what a worker receives at W = 8 is at most 1.75x what it receives at W = 2
(plus the few bits Golomb spends on sparser per-worker sets), where the
all-gather's grows 7x. This is the shared-support family of sparse
all-reduces (ScaleCom's cyclic leader, ARC-Top-k's shared sketch,
../shared/REFERENCE.md section 7) with every worker contributing its share
of the support at every step; docs/sparse_allreduce.md compares it with
the region-partitioned family (Ok-Topk).

Error feedback: replica i's residual is x_i outside U, plus the rounding of
the wire dtype at U: everything it selected was sent (its picks are in U),
and the positions the others picked were sent too. memory 'dgc' masks the
momentum at U.

Dense steps: a step of the dense warm-up (warmup='dense'), or one where any
replica's compensated gradient holds NaN or Inf (nonfinite='dense', the
policy of every communicator), sums every position: U = all of them, so a
NaN reaches every worker's result (the replica that held it keeps its
residual as it was, the step's rule in Exchange.commit).

Every positions payload names the step number and a fingerprint of the
bucket's layout, the density, the codecs and W: a peer with another model,
another density or another number of workers is an error that says so.
"""
import zlib

import tensorflow as tf

from deepreduce_tf._checks import check, guarded
from deepreduce_tf.accounting import ring_received
from deepreduce_tf.compressor import SUMMABLE_WIRE_DTYPES, bucket_record
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.endpoint import Outcome
from deepreduce_tf.exchange.rounds import GatherParts, Replicate, Sum
from deepreduce_tf.memory import Sent
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import payload as payload_ops

KIND_POSITIONS = 20  # the payload kind of round 1
FIELDS = ("step", "n", "k", "aux0", "aux1", "dense", "config")


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
        if not vc.additive:
            problems.append(f"value codec {vc.name!r} is not additive: the values are summed "
                            f"by the all-reduce (use {', '.join(SUMMABLE_WIRE_DTYPES)})")
        elif vc.name not in SUMMABLE_WIRE_DTYPES:
            problems.append(f"value codec {vc.name!r} has no wire dtype here "
                            f"(use {', '.join(SUMMABLE_WIRE_DTYPES)})")
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

    def _positions_payload(self, comp, bucket, prep, R, config):
        """(payload, dense): the replica's positions, coded, and whether its
        step must be dense (dense warm-up, or x holds NaN/Inf)."""
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
        return payload_ops.pack([enc.section], meta, kind=KIND_POSITIONS)

    def _support(self, comp, bucket, received, step, config):
        """The gathered positions payloads -> U: the union in replica order
        (the same on every replica), every position on a dense step."""
        n = bucket.sparse_n
        parts, dense = [], []
        for r, payload in enumerate(received):
            meta, (section,) = payload_ops.unpack(payload, 1, len(FIELDS), kind=KIND_POSITIONS,
                                                  field_names=FIELDS)
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
        any_dense = tf.reduce_any(tf.stack(dense))
        union = tf.unique(tf.concat(parts, 0), out_idx=tf.int64)[0]
        # |U| and k (the positions the replicas picked) for the accounting:
        # 0, 0 on a dense step
        picks = tf.add_n([tf.size(p, out_type=tf.int64) for p in parts])
        size = (tf.where(any_dense, tf.constant(0, tf.int64), tf.size(union, out_type=tf.int64)),
                tf.where(any_dense, tf.constant(0, tf.int64), picks))
        return tf.cond(any_dense, lambda: tf.range(n, dtype=tf.int64), lambda: union), size

    # ------------------------------------------------------------ the step
    def rounds(self, group, exchanges, plan, prepared, keys):
        R = group.num_replicas
        head = exchanges[0].compressor
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
                        self._config(ex.compressor, plan.buckets[b], R)))
        supports, support_sizes = {}, []
        if sparse:
            key = "sparse_allreduce/" + "|".join(keys)
            received = yield GatherParts(payloads, key)  # received[j][r]
            with tf.device(group.reduce_device):
                for j, b in enumerate(sparse):
                    supports[b], size = self._support(
                        head, plan.buckets[b], received[j], prepared[0][b].step, configs[b])
                    support_sizes.append(size)
                gathered = [[self.gathered(received[j], [p[j] for p in payloads])[r]
                             for j in range(len(sparse))] for r in range(len(exchanges))]
            copies = {}
            for b in sparse:
                copies[b] = yield Replicate(supports[b])
        # Round 2: the values at U and the dense sections, one all-reduce.
        vectors, contributions = [], []
        for r, (ex, device) in enumerate(zip(exchanges, group.devices)):
            with tf.device(device):
                mine, contrib = [], {}
                for b, (bucket, prep) in enumerate(zip(plan.buckets, prepared[r])):
                    if bucket.sparse_n:
                        wire_dtype = ex.compressor.wire_dtype(bucket.dtype)
                        at = copies[b][r]
                        with tf.control_dependencies(prep.deps):
                            wire = tf.cast(fusion_ops.gather(prep.x, at), wire_dtype)
                        contrib[b] = tf.cast(wire, bucket.dtype)
                    else:
                        wire = tf.zeros([0], bucket.dtype)
                    mine += [wire, prep.rest]
            vectors.append(mine)
            contributions.append(contrib)
        summed = yield Sum(vectors)
        sums = []
        with tf.device(group.reduce_device):
            for b, bucket in enumerate(plan.buckets):
                wire_sum, rest = summed[2 * b], summed[2 * b + 1]
                if bucket.sparse_n:
                    out = fusion_ops.scatter_sum(supports[b], tf.cast(wire_sum, bucket.dtype),
                                                 bucket.sparse_n)
                    out = tf.concat([out, rest], 0) if bucket.dense_n else out
                else:
                    out = rest
                sums.append(out)
        outcomes, received_bytes = [], []
        for r, (device, preps) in enumerate(zip(group.devices, prepared)):
            with tf.device(device):
                outs, got = [], []
                for b, (bucket, prep) in enumerate(zip(plan.buckets, preps)):
                    vecs = vectors[r][2 * b:2 * b + 2]
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
