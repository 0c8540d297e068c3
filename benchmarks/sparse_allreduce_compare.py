"""The two families of sparse all-reduce on the main job, on accuracy.

    .venv/bin/python benchmarks/sparse_allreduce_compare.py --family global_topk \\
        --seed 0 --compress_ratio 0.01 --train_dir /tmp/okt_s0

Trains the main job (deepreduce-bench's defaults: ResNet-20, Fashion-MNIST,
2 replicas, 600 steps, evaluated as --compare evaluates) with the
`sparse_allreduce` preset's recipe (top-k per variable, DGC's momentum
correction, 60-step exponential warm-up, golomb positions, fp16 values), the
exchange replaced by one of the two families (../shared/REFERENCE.md §7):

  shared_support  the library's communicator 'sparse_allreduce': every worker's
                  top-(k/W) positions, the values of ALL workers at their union
                  summed (docs/sparse_allreduce.md);
  global_topk     the region-partitioned family's result (Ok-Topk, gTop-k):
                  every worker selects its local top-k; the sum of the selected
                  entries is formed (Ok-Topk: a sparse reduce-scatter over W
                  index regions) and only its k largest positions are kept
                  (Ok-Topk: the global threshold, then a sparse all-gather);
                  worker i contributes x_i at positions it selected AND that
                  were kept; everything else stays in its residual (selected
                  but dropped globally included), as Ok-Topk does.

global_topk is EMULATED here for its numbers, not its transport: the selected
entries travel by the all-gather (communicator 'oktopk_emulated', registered
by this script), so its accounted bytes are the all-gather's, not Ok-Topk's.
Its bytes in docs/sparse_allreduce.md are Ok-Topk's own bound, computed from
the same k: a sparse reduce-scatter and all-gather of (position, value) pairs,
between 2k (W - 1) / W and 6k (W - 1) / W pairs per worker.
"""
import argparse
import sys

import tensorflow as tf

from deepreduce_tf import communicators
from deepreduce_tf.compressor import bucket_record
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.endpoint import Outcome
from deepreduce_tf.exchange.rounds import GatherParts, Replicate
from deepreduce_tf.memory import Sent
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import payload as payload_ops

KIND = 21


class OkTopkEmulated(Communicator):
    """Ok-Topk's result through an all-gather (see the module docstring)."""

    name = "oktopk_emulated"
    travels = "gathered bytes: every replica's local top-k (positions and values)"
    collectives = ("gather",)
    # GatherParts (rounds.COLLECTIVE: an all-gather)

    def check(self, exchange):
        if not hasattr(exchange.compressor.sparsifier, "select_ratio"):
            raise ValueError("oktopk_emulated needs compressor 'topk'")

    def counts(self, exchange):
        return True, exchange.counts()[1]

    @staticmethod
    def _local(comp, bucket, prep):
        sp = comp.sparsifier
        ratio = tf.constant(sp.compress_ratio, tf.float64)
        if prep.warmup is not None and prep.warmup[1] is not None:
            ratio = tf.where(prep.warmup[0], tf.cast(prep.warmup[1], tf.float64), ratio)
        with tf.control_dependencies(prep.deps):
            idx = tf.cast(sp.select_ratio(prep.x, bucket.lengths, ratio), tf.int64)
        return idx, ratio

    def rounds(self, group, exchanges, plan, prepared, keys):
        sums, outcomes, received = [], [[] for _ in exchanges], [[] for _ in exchanges]
        for b, bucket in enumerate(plan.buckets):
            n = bucket.sparse_n
            local, sent_payloads = [], []
            for r, (ex, device) in enumerate(zip(exchanges, group.devices)):
                with tf.device(device):
                    prep = prepared[r][b]
                    if n:
                        idx, ratio = self._local(ex.compressor, bucket, prep)
                        vals = tf.cast(tf.cast(fusion_ops.gather(prep.x, idx), tf.float16),
                                       tf.float32)
                        enc = ex.compressor.index_codec.encode(idx, n)
                        meta = tf.stack([tf.size(idx, out_type=tf.int64), enc.aux[0],
                                         enc.aux[1]])
                        vbytes = tf.reshape(tf.bitcast(tf.cast(vals, tf.float16), tf.uint8),
                                            [-1])
                        payload = payload_ops.pack([enc.section, vbytes], meta, kind=KIND)
                    else:
                        idx, ratio, payload = None, None, tf.zeros([0], tf.uint8)
                    rest = prep.rest
                    rbytes = tf.reshape(tf.bitcast(rest, tf.uint8), [-1]) if bucket.dense_n \
                        else tf.zeros([0], tf.uint8)
                    local.append(idx)
                    sent_payloads.append((payload, rbytes))
            got = yield GatherParts([[p, rb] for p, rb in sent_payloads],
                                    f"oktopk/{bucket.key}")
            with tf.device(group.reduce_device):
                total = tf.zeros([n], bucket.dtype)
                rest_sum = None
                for r in range(len(got[0])):
                    if n:
                        meta, (isec, vsec) = payload_ops.unpack(got[0][r], 2, 3, kind=KIND)
                        pos = exchanges[0].compressor.index_codec.decode(
                            isec, n, meta[0], (meta[1], meta[2]))
                        v = tf.cast(tf.bitcast(tf.reshape(vsec, [-1, 2]), tf.float16),
                                    bucket.dtype)
                        total = total + fusion_ops.scatter_sum(tf.cast(pos, tf.int64), v, n)
                    if bucket.dense_n:
                        rv = tf.reshape(tf.bitcast(tf.reshape(got[1][r], [-1, bucket.dtype.size]),
                                                   bucket.dtype), [-1])
                        rest_sum = rv if rest_sum is None else rest_sum + rv
                if n:
                    # The global selection: the k largest of the summed selected
                    # entries (per variable, as the local selection).
                    sp = exchanges[0].compressor.sparsifier
                    kept = tf.cast(sp.select_ratio(total, bucket.lengths, ratio), tf.int64)
                    mask = tf.scatter_nd(tf.expand_dims(kept, 1),
                                         tf.ones_like(kept, tf.int32), [n]) > 0
                    out = tf.where(mask, total, tf.zeros_like(total))
                else:
                    out = tf.zeros([0], bucket.dtype)
                    mask = None
                if bucket.dense_n:
                    out = tf.concat([out, rest_sum], 0)
                sums.append(out)
            masks = (yield Replicate(mask)) if n else [None] * len(exchanges)
            for r, (ex, device) in enumerate(zip(exchanges, group.devices)):
                with tf.device(device):
                    prep = prepared[r][b]
                    sent = None
                    if n:
                        mine = tf.boolean_mask(local[r], fusion_ops.gather(masks[r], local[r]))
                        vals = tf.cast(tf.cast(fusion_ops.gather(prep.x, mine), tf.float16),
                                       bucket.dtype)
                        sent = Sent(prep.x, mine, vals)
                    nbytes = tf.size(sent_payloads[r][0], out_type=tf.int64) + \
                        tf.size(sent_payloads[r][1], out_type=tf.int64)
                    outcomes[r].append(Outcome(sent, None, bucket_record(bucket, nbytes)))
                    others = tf.add_n([tf.size(g, out_type=tf.int64)
                                       for part in got for g in part]) - nbytes
                    received[r].append((f"oktopk/{bucket.key}", others))
        return Transfer(sums, outcomes, [[] for _ in exchanges], received)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=("shared_support", "global_topk"), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compress_ratio", type=float, default=0.01)
    parser.add_argument("--train_dir", required=True)
    parser.add_argument("--num_batches", type=int, default=600)
    args = parser.parse_args(argv)
    communicators.register(OkTopkEmulated)
    from deepreduce_bench import cli
    from deepreduce_bench.presets import PRESETS

    flags = [a for a in PRESETS["sparse_allreduce"].args
             if not a.startswith(("--compress_ratio", "--communicator"))]
    comm = "sparse_allreduce" if args.family == "shared_support" else "oktopk_emulated"
    flags += [f"--compress_ratio={args.compress_ratio}", f"--communicator={comm}"]
    # The flags --compare gives each configuration (deepreduce_bench.compare.shared_args).
    flags += ["--data_name=fashion_mnist", f"--seed={args.seed}", "--eval",
              f"--num_batches={args.num_batches}", "--codec_repeats=0",
              f"--train_dir={args.train_dir}"]
    cli.main(["deepreduce-bench"] + flags)


if __name__ == "__main__":
    sys.exit(main())
