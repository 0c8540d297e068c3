"""Stateless codecs of one component of a sparse tensor.

index codecs (codecs.index): a sorted index set of K positions out of n <->
bytes, and the positions the receiver will decode (equal to the input for
lossless codecs, the Bloom filter's selection otherwise).
value codecs (codecs.value): K values <-> bytes, and the permutation that
pairs decoded values with positions when the codec reorders them.

Both are registries name -> class; the compressor (deepreduce_tf.compressors)
composes one of each with a sparsifier and a memory.
"""
from deepreduce_tf.codecs.index import INDEX_CODECS, IndexCodec, make_index_codec
from deepreduce_tf.codecs.value import VALUE_CODECS, ValueCodec, make_value_codec

__all__ = ["INDEX_CODECS", "IndexCodec", "make_index_codec",
           "VALUE_CODECS", "ValueCodec", "make_value_codec"]
