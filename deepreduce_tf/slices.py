"""tf.IndexedSlices (embedding gradients) through the compressor, never
densified: duplicate rows summed, rows sorted and coded losslessly by the
index codec, their values by the value codec (Compressor.encode_slices /
decompress_slices; no sparsifier and no memory apply).
"""
import tensorflow as tf

from deepreduce_tf._checks import guarded
from deepreduce_tf.codecs import index as index_codecs
from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import payload as payload_ops
from deepreduce_tf.wire import (DTYPE_CODES, F_AUX0, F_AUX1, F_COUNT, F_DTYPE, F_INDEX, F_K,
                                F_MODE, F_N, F_VALUE, META_FIELDS, MODE_SLICES, NUM_SECTIONS,
                                SlicesContext, _graph_safe)


class SlicesCoding:
    """The IndexedSlices half of compressor.Compressor (a base class of it:
    it uses the compressor's index_codec, value_codec, identity() and
    _check_identity())."""

    def _slices_row_codec(self):
        """The index codec for embedding rows: the configured one when it is
        lossless, else golomb (a Bloom filter would drop rows, and row
        gradients keep no residual)."""
        if self.index_codec.lossless:
            return self.index_codec
        return index_codecs.GolombIndex()

    @_graph_safe
    def encode_slices(self, slices, name=None, dense_shape=None):
        """Compresses a tf.IndexedSlices gradient without densifying it.

        Duplicate rows are summed, rows are sorted and coded losslessly by the
        index codec (golomb when the configured one is a Bloom filter; raw
        int32 with deepreduce None/'value'), the row values by the value
        codec. No sparsifier and no memory apply: the slices are already
        sparse, and a lossy value codec's error on them is not fed back.

        Args:
          slices: tf.IndexedSlices with values [m, ...] and indices [m].
          name: the variable's name (for accounting, and with the dense
            shape the payload's identity, as in compress(); with name=None
            the identity is the dense shape only).
          dense_shape: the dense gradient's static shape, if
            slices.dense_shape is not statically known.

        Returns:
          (payload, SlicesContext).
        """
        if not isinstance(slices, tf.IndexedSlices):
            raise TypeError(f"compress_slices needs a tf.IndexedSlices, got {type(slices)}")
        key = name or "slices"
        values = tf.convert_to_tensor(slices.values)
        if values.dtype not in DTYPE_CODES:
            raise TypeError(f"cannot compress IndexedSlices {key!r} of dtype "
                            f"{values.dtype.name}; supported: float16, bfloat16, float32, "
                            "float64")
        if dense_shape is None and slices.dense_shape is not None:
            dense_shape = tf.get_static_value(slices.dense_shape)
        if dense_shape is None:
            raise ValueError(f"IndexedSlices {key!r}: dense_shape is not static; pass "
                             "compress_slices(..., dense_shape=variable.shape)")
        dense_shape = tf.TensorShape([int(d) for d in dense_shape])
        if not values.shape[1:].is_compatible_with(dense_shape[1:]):
            raise ValueError(f"IndexedSlices {key!r}: values shape {values.shape} does not "
                             f"match dense shape {dense_shape}")
        vocab = int(dense_shape[0])
        width = int(dense_shape[1:].num_elements())
        dtype = values.dtype
        indices = tf.cast(slices.indices, tf.int64)
        rows, where = tf.unique(indices)
        merged = tf.math.unsorted_segment_sum(tf.reshape(values, [-1, width]), where,
                                              tf.size(rows))
        order = tf.argsort(rows)
        rows = fusion_ops.gather(rows, order)
        merged = fusion_ops.gather(merged, order)
        flat = tf.reshape(merged, [-1])
        u = tf.size(rows, out_type=tf.int64)
        count = u * width
        codec = self._slices_row_codec()
        ienc = codec.encode(rows, vocab)
        vc = self.value_codec
        empty = tf.zeros([0], tf.uint8)
        perm_section = empty
        if vc.name == "raw":
            vsec = vc.encode(flat, None).section
        else:
            venc = vc.encode(tf.cast(flat, tf.float32), tf.constant(0, tf.int64))
            vsec = venc.section
            if venc.perm is not None:
                perm_section = payload_ops.perm_encode(venc.perm)
        meta = tf.stack([
            tf.constant(MODE_SLICES, tf.int64), tf.constant(codec.codec_id, tf.int64),
            tf.constant(vc.codec_id, tf.int64), tf.constant(DTYPE_CODES[dtype], tf.int64),
            tf.constant(dense_shape.num_elements(), tf.int64),
            tf.constant(self.identity(key, dense_shape), tf.int64), u, count,
            tf.constant(vocab, tf.int64), tf.constant(width, tf.int64)])
        payload = payload_ops.pack([ienc.section, vsec, perm_section], meta)
        nbytes = tf.size(payload, out_type=tf.int64)
        given = values.shape.num_elements()
        dense_bytes = ((given * dtype.size + 8 * int(values.shape[0]))
                       if given is not None else
                       tf.size(values, out_type=tf.int64) * dtype.size
                       + 8 * tf.size(indices, out_type=tf.int64))
        ctx = SlicesContext(key, dense_shape, dtype, width, dense_bytes, nbytes)
        return payload, ctx

    @_graph_safe
    def decompress_slices(self, payload, ctx):
        """Decodes a compress_slices() payload of any worker: tf.IndexedSlices
        with sorted unique int64 row indices. The payload of another variable
        (name or dense shape) is refused like in decompress()."""
        if not isinstance(ctx, SlicesContext):
            raise TypeError(f"ctx must be the SlicesContext of compress_slices(), got {ctx!r}")
        codec = self._slices_row_codec()
        vocab = int(ctx.dense_shape[0])
        expected = {F_MODE: MODE_SLICES, F_INDEX: codec.codec_id,
                    F_VALUE: self.value_codec.codec_id, F_DTYPE: DTYPE_CODES[ctx.dtype],
                    F_N: ctx.dense_shape.num_elements(), F_AUX0: vocab,
                    F_AUX1: ctx.row_width}
        meta, (isec, vsec, psec) = payload_ops.unpack(
            payload, NUM_SECTIONS, len(META_FIELDS), expected=expected,
            field_names=list(META_FIELDS))
        # Rows and values are read from meta (u, count): guarding meta
        # orders the identity check before any decoding.
        meta = guarded(meta, self._check_identity(
            meta, self.identity(ctx.name, ctx.dense_shape),
            f"variable {ctx.name!r} of dense shape {ctx.dense_shape.as_list()}", "_slices"))
        u, count = meta[F_K], meta[F_COUNT]
        rows = codec.decode(isec, vocab, u, None)
        vc = self.value_codec
        values = tf.cast(vc.decode(vsec, count, ctx.dtype, ctx.dense_shape.num_elements()),
                         ctx.dtype)
        if vc.sorting:
            perm = payload_ops.perm_decode(psec, count)
            values = fusion_ops.unpermute(values, perm)
        values = tf.reshape(values, [-1] + ctx.dense_shape[1:].as_list())
        return tf.IndexedSlices(values, rows,
                                tf.constant(ctx.dense_shape.as_list(), tf.int64))
