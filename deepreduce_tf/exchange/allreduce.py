"""All-reduce: the payloads are summed element by element by the collective.

Only compressors whose payloads are summable qualify
(Compressor.summable_problems: positions every worker agrees on, compressor
'none' or 'randomk', whose positions are a function of the shared per-step
seed, and values that add: value raw, fp16 or bf16, no index codec).
Anything else is refused at construction. Each bucket travels as two
vectors: its values at the agreed positions in the wire dtype
(Compressor.encode_summable), and its dense section in its own dtype. Bytes
are not summable, so this wire format has no header. This communicator only
moves the vectors: selecting, encoding and decoding are the compressor's.
"""
import tensorflow as tf

from deepreduce_tf.compressor import SUMMABLE_WIRE_DTYPES, bucket_record
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.endpoint import Outcome
from deepreduce_tf.exchange.rounds import Sum


class Allreduce(Communicator):
    name = "allreduce"
    travels = ("summed vectors: per bucket its values at the positions every replica shares "
               "(wire dtype) and its dense section")
    additive = True
    collectives = ("sum",)

    WIRE_DTYPES = SUMMABLE_WIRE_DTYPES  # the compressor's (kept for earlier code)

    def check(self, exchange):
        problems = exchange.compressor.summable_problems()
        if exchange.warmup_steps:
            problems.append("warm-up is implemented by the all-gather exchange only")
        if problems:
            raise ValueError("communicator 'allreduce' sums payloads element by element, but "
                             + "; ".join(problems) + ". Use communicator='allgather', which "
                             "works with every combination.")

    def counts(self, exchange):
        seeded = not exchange.sparsifier.dense  # randomk's positions come from the seed
        return seeded, seeded

    @staticmethod
    def encode_bucket(exchange, bucket, prepared):
        """One replica's summable vectors of a prepared bucket: [values at the
        agreed positions in the wire dtype, the dense section]. Returns
        (vectors, positions, Outcome)."""
        positions, sent = None, None
        if bucket.sparse_n:
            with tf.control_dependencies(prepared.deps):
                wire, positions, sent = exchange.compressor.encode_summable(
                    prepared.x, prepared.seed, bucket.lengths)
        else:
            wire = tf.zeros([0], bucket.dtype)
        vectors = [wire, prepared.rest]
        nbytes = tf.add_n([tf.size(v, out_type=tf.int64) * v.dtype.size for v in vectors])
        return vectors, positions, Outcome(sent, None, bucket_record(bucket, nbytes))

    @staticmethod
    def decode_bucket(exchange, bucket, summed, positions):
        """The summed vectors of a bucket -> its flat vector."""
        wire, rest = summed
        sparse = exchange.compressor.decode_summable(wire, positions, bucket.sparse_n,
                                                     bucket.dtype)
        return tf.concat([sparse, rest], 0) if bucket.dense_n else sparse

    def rounds(self, group, exchanges, plan, prepared, keys):
        vectors, outcomes, positions = [], [], None
        for ex, device, preps in zip(exchanges, group.devices, prepared):
            with tf.device(device):
                mine, where, outs = [], [], []
                for bucket, prep in zip(plan.buckets, preps):
                    vecs, pos, out = self.encode_bucket(ex, bucket, prep)
                    mine.extend(vecs)
                    where.append(pos)
                    outs.append(out)
            vectors.append(mine)
            outcomes.append(outs)
            positions = positions or where  # the same on every replica
        summed = yield Sum(vectors)
        with tf.device(group.reduce_device):
            sums = [self.decode_bucket(exchanges[0], b, summed[2 * i:2 * i + 2], positions[i])
                    for i, b in enumerate(plan.buckets)]
            got = self.reduced(group, vectors[0])
        key = "allreduce/" + "|".join(keys)
        return Transfer(sums, outcomes, [[] for _ in exchanges],
                        [[(key, got)] for _ in exchanges])
