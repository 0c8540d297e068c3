"""Fused payloads: one container per bucket, one per batch (a base class of
compressor.Compressor, as slices.SlicesCoding is).

A bucket (deepreduce_tf.fusion: the tensors of one dtype, flattened into one
vector) travels as ONE payload of kind KIND_BUCKET: the encoding of its
sparse section (one sparsification, one index and one value coding over all
its large tensors) and its dense section (the small tensors) as raw bytes.
A batch of several buckets travels as one container of kind KIND_BATCH whose
sections are the bucket payloads (a batch of one bucket is that bucket's
payload). Decoding sums: decompress_buckets_sum and decompress_batch_sum
decode several workers' payloads with one scatter per bucket, bit for bit
the ordered sum of decoding each.

The methods use the compressor's codecs and its per-tensor coding
(_meta, _raw_bytes, _encode_dense, _decode_dense, _decode_modes,
_decode_sparse_parts); this module holds the containers, the compressor the
codes.
"""
import tensorflow as tf

from deepreduce_tf import fusion
from deepreduce_tf._checks import check, guarded
from deepreduce_tf.codecs import value as value_codecs
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import payload as payload_ops
from deepreduce_tf.fusion import ordered_sum
from deepreduce_tf.wire import (BATCH_FIELDS, BUCKET_FIELDS, BUCKET_SECTIONS, BatchContext,
                                BucketContext, DTYPE_CODES, F_CONFIG, F_DENSE_N, F_DTYPE, F_INDEX,
                                F_LAYOUT, F_MODE, F_N, F_VALUE, KIND_BUCKET, MODE_DENSE,
                                MODE_SPARSE, _graph_safe, bucket_record)


class FusedCoding:
    """The bucket and batch containers of compressor.Compressor."""

    @staticmethod
    def check_bucket(bucket, flat):
        """flat as a Tensor, or an error if it is not the bucket's vector."""
        if not isinstance(bucket, fusion.Bucket):
            raise TypeError(f"bucket must be a fusion.Bucket, got {bucket!r}")
        flat = tf.convert_to_tensor(flat)
        if flat.dtype != bucket.dtype or flat.shape.num_elements() != bucket.n:
            raise ValueError(f"bucket {bucket.key!r} holds {bucket.n} {bucket.dtype.name} "
                             f"elements, got {flat.dtype.name} {flat.shape}")
        return flat

    def encode_empty(self, dtype):
        """The encoding of an empty sparse section (a bucket of small tensors)."""
        return self._encode_dense(tf.zeros([0], dtype))

    def bucket_payload(self, bucket, enc, rest):
        """One fused bucket's payload: the encoding of its sparse section
        (ONE sparsification, one index and one value coding) and its dense
        section `rest` as raw bytes. Returns (payload, BucketContext)."""
        dense_section = self._raw_bytes(rest) if bucket.dense_n else tf.zeros([0], tf.uint8)
        meta = self._meta(enc.mode, bucket.dtype, bucket.sparse_n, enc.k, enc.count,
                          (enc.aux0, enc.aux1), extra=(bucket.dense_n, bucket.layout_id))
        payload = payload_ops.pack([enc.index, enc.value, enc.perm, dense_section], meta,
                                   kind=KIND_BUCKET)
        nbytes = tf.size(payload, out_type=tf.int64)
        return payload, bucket_record(bucket, nbytes)

    @_graph_safe
    def decompress_bucket(self, payload, ctx):
        """Decodes a compress_bucket() payload of any worker into the flat
        bucket vector [n] (sparse section, then dense section)."""
        if not isinstance(ctx, BucketContext):
            raise TypeError(f"ctx must be the BucketContext of compress_bucket(), got {ctx!r}")
        return self.decompress_buckets_sum([payload], ctx)

    def _unpack_bucket(self, payload, ctx):
        b = ctx.bucket
        expected = {F_INDEX: self.index_codec.codec_id, F_VALUE: self.value_codec.codec_id,
                    F_DTYPE: DTYPE_CODES[b.dtype], F_N: b.sparse_n, F_CONFIG: self.config_id,
                    F_DENSE_N: b.dense_n, F_LAYOUT: b.layout_id}
        if not b.sparse_n:
            expected[F_MODE] = MODE_DENSE
        return payload_ops.unpack(payload, BUCKET_SECTIONS, len(BUCKET_FIELDS),
                                  kind=KIND_BUCKET, expected=expected,
                                  field_names=list(BUCKET_FIELDS))

    def _decode_parts(self, meta, sections, n, dtype):
        """(positions, values) of a bucket's sparse section in either mode (a
        dense-mode payload: every position)."""
        mode = meta[F_MODE]
        mode = guarded(mode, check(mode <= MODE_SPARSE, "payload field 'mode' is not 0 or 1"))
        return tf.cond(
            tf.equal(mode, MODE_SPARSE),
            lambda: self._decode_sparse_parts(meta, sections, n, dtype),
            lambda: (tf.range(n, dtype=tf.int64), self._decode_dense(meta, sections, n, dtype)))

    @_graph_safe
    def decompress_buckets_sum(self, payloads, ctx):
        """The SUM, in list order, of compress_bucket() payloads of several
        workers for one bucket, as its flat vector [n]. Sparse sections are
        scattered once, all payloads' positions together (ScatterNd adds in
        update order: the same bits as decoding each and summing in order)."""
        if not isinstance(ctx, BucketContext):
            raise TypeError(f"ctx must be the BucketContext of compress_bucket(), got {ctx!r}")
        b = ctx.bucket
        unpacked = [self._unpack_bucket(p, ctx) for p in payloads]
        checks = []
        if not b.sparse_n:  # no sparse section: its fields and sections are empty
            checks += [self._decode_dense(meta, sections, 0, b.dtype)
                       for meta, sections in unpacked]
            sparse = None
        elif self.sparsifier.dense:
            sparse = ordered_sum([self._decode_modes(meta, sections, b.sparse_n, b.dtype)
                                  for meta, sections in unpacked])
        else:
            parts = [self._decode_parts(meta, sections, b.sparse_n, b.dtype)
                     for meta, sections in unpacked]
            positions = tf.concat([p for p, _ in parts], 0)
            values = tf.concat([v for _, v in parts], 0)
            sparse = (positions, values)
        if b.dense_n:
            dense = ordered_sum([value_codecs.RawValue().decode(
                sections[3], tf.constant(b.dense_n, tf.int64), b.dtype)
                for _, sections in unpacked])
        else:
            dense = None
            checks += [check(tf.equal(tf.size(sections[3]), 0),
                             "bucket payload's dense section must be empty")
                       for _, sections in unpacked]
        if isinstance(sparse, tuple):  # scattered, with the dense section after it
            flat = fusion_ops.scatter_sum(*sparse, b.sparse_n, tail=dense)
        else:
            flat = [t for t in (sparse, dense) if t is not None]
            flat = flat[0] if len(flat) == 1 else (tf.concat(flat, 0) if flat
                                                   else tf.zeros([0], b.dtype))
        return tf.reshape(guarded(flat, *checks), [b.n])

    # ----------------------------------------------------------------- batches
    def batch_payload(self, plan, parts):
        """The payload of a batch from its buckets' payloads: the bucket's
        own when there is one, else a container of kind KIND_BATCH whose
        sections are the bucket payloads."""
        if len(parts) == 1:  # one bucket: its payload is the batch's (no second container)
            return parts[0]
        meta = [len(parts), self.config_id, plan.layout_id]
        return payload_ops.pack(parts, meta, kind=payload_ops.KIND_BATCH)

    @_graph_safe
    def decompress_batch_flat(self, payload, ctx):
        """A compress_batch() payload of any worker -> one flat decoded
        vector per bucket (sum these across workers, then ctx.plan.unpack)."""
        if not isinstance(ctx, BatchContext):
            raise TypeError(f"ctx must be the BatchContext of compress_batch(), got {ctx!r}")
        return [self.decompress_bucket(p, c)
                for p, c in zip(self._unpack_batch(payload, ctx), ctx.contexts)]

    def _unpack_batch(self, payload, ctx):
        if len(ctx.contexts) == 1:
            return [payload]
        _, parts = payload_ops.unpack(
            payload, len(ctx.contexts), len(BATCH_FIELDS), kind=payload_ops.KIND_BATCH,
            expected={0: len(ctx.contexts), 1: self.config_id, 2: ctx.plan.layout_id},
            field_names=list(BATCH_FIELDS))
        return parts

    @_graph_safe
    def decompress_batch_sum(self, payloads, ctx):
        """The SUM, in list order, of several workers' compress_batch()
        payloads, as one flat vector per bucket: bit for bit the ordered sum
        of their decompress_batch_flat() vectors, with one scatter per bucket
        instead of one per payload (then ctx.plan.unpack)."""
        if not isinstance(ctx, BatchContext):
            raise TypeError(f"ctx must be the BatchContext of compress_batch(), got {ctx!r}")
        per_payload = [self._unpack_batch(p, ctx) for p in payloads]
        return [self.decompress_buckets_sum([parts[i] for parts in per_payload], c)
                for i, c in enumerate(ctx.contexts)]

    @_graph_safe
    def decompress_batch(self, payload, ctx):
        """Inverse of compress_batch: the list of decoded tensors."""
        return ctx.plan.unpack(self.decompress_batch_flat(payload, ctx))
