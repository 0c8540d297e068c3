"""All-reduce: the payloads are summed element by element by the collective.

Only compressors whose payloads are summable qualify: positions every
worker agrees on (compressor 'none', or 'randomk', whose positions are a
function of the shared per-step seed) and values that add (value raw, fp16
or bf16, no index codec). Anything else is refused at construction. Each
bucket travels as two vectors: its values at the agreed positions in the
wire dtype, and its dense section in its own dtype. Bytes are not summable,
so this wire format has no header.
"""
import tensorflow as tf

from deepreduce_tf.compressor import bucket_record
from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.endpoint import Outcome
from deepreduce_tf.memory import Sent
from deepreduce_tf.ops import codec_table
from deepreduce_tf.ops import fusion as fusion_ops


class Allreduce(Communicator):
    name = "allreduce"
    travels = ("summed vectors: per bucket its values at the positions every replica shares "
               "(wire dtype) and its dense section")
    additive = True

    # value codec -> the dtype its summable values travel in (None: the
    # gradient's own): the codec table's wire_dtype column.
    WIRE_DTYPES = {name: None if dtype == "gradient" else tf.as_dtype(dtype)
                   for name, dtype in codec_table.wire_dtypes().items()}

    def check(self, exchange):
        problems = []
        if not exchange.sparsifier.data_independent:
            problems.append(f"compressor {exchange.sparsifier.name!r} picks different "
                            "positions on every worker (use 'none' or 'randomk')")
        if exchange.index_codec.name != "raw":
            problems.append(f"index codec {exchange.index_codec.name!r} writes bytes, "
                            "which cannot be summed (use deepreduce None or 'value')")
        if not exchange.value_codec.additive:
            problems.append(f"value codec {exchange.value_codec.name!r} is not additive "
                            "(use raw, fp16 or bf16)")
        elif exchange.value_codec.name not in self.WIRE_DTYPES:
            problems.append(f"value codec {exchange.value_codec.name!r} is summable but has no "
                            f"wire dtype here (use {', '.join(self.WIRE_DTYPES)})")
        if getattr(exchange, "warmup_steps", 0):
            problems.append("warm-up is implemented by the all-gather exchange only")
        if problems:
            raise ValueError("communicator 'allreduce' sums payloads element by element, but "
                             + "; ".join(problems) + ". Use communicator='allgather', which "
                             "works with every combination.")

    def counts(self, exchange):
        seeded = not exchange.sparsifier.dense  # randomk's positions come from the seed
        return seeded, seeded

    @classmethod
    def wire_dtype(cls, exchange, dtype):
        """The dtype the summable values travel in."""
        return cls.WIRE_DTYPES[exchange.value_codec.name] or dtype

    def encode_bucket(self, exchange, bucket, prepared):
        """One replica's summable vectors of a prepared bucket: [values at the
        agreed positions in the wire dtype, the dense section]. Returns
        (vectors, positions, Outcome)."""
        positions, sent = None, None
        rest = prepared.rest
        if bucket.sparse_n:
            x = prepared.x
            with tf.control_dependencies(prepared.deps):
                wire_dtype = self.wire_dtype(exchange, bucket.dtype)
                none = (tf.zeros([0], tf.int64), tf.zeros([0], bucket.dtype))
                if exchange.sparsifier.dense:
                    wire = tf.cast(x, wire_dtype)
                    sent = Sent(x - tf.cast(wire, bucket.dtype), *none)
                else:
                    positions = exchange.sparsifier.select_segments(x, bucket.lengths,
                                                                    prepared.seed)
                    wire = tf.cast(fusion_ops.gather(x, positions), wire_dtype)
                    sent = Sent(x, tf.cast(positions, tf.int64), tf.cast(wire, bucket.dtype))
        else:
            wire = tf.zeros([0], bucket.dtype)
        nbytes = tf.add_n([tf.size(v, out_type=tf.int64) * v.dtype.size for v in (wire, rest)])
        ctx = bucket_record(bucket, nbytes)
        return [wire, rest], positions, Outcome(sent, None, ctx)

    @staticmethod
    def decode_bucket(bucket, summed, positions):
        """The summed vectors of a bucket -> its flat vector."""
        wire, rest = summed
        if positions is None:
            sparse = tf.cast(wire, bucket.dtype)
        else:
            sparse = fusion_ops.scatter_sum(positions, tf.cast(wire, bucket.dtype),
                                            bucket.sparse_n)
        return tf.concat([sparse, rest], 0) if bucket.dense_n else sparse

    def transfer(self, transport, exchanges, plan, prepared, keys):
        vectors, outcomes, positions = [], [], None
        for ex, device, preps in zip(exchanges, transport.devices, prepared):
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
        summed = transport.all_reduce(vectors)
        with tf.device(transport.reduce_device):
            sums = [self.decode_bucket(b, summed[2 * i:2 * i + 2], positions[i])
                    for i, b in enumerate(plan.buckets)]
            got = self.reduced(transport, vectors[0])
        key = "allreduce/" + "|".join(keys)
        return Transfer(sums, outcomes, [[] for _ in exchanges],
                        [[(key, got)] for _ in exchanges])

