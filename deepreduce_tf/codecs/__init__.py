"""Codecs of one component of a sparse tensor, and their registry.

index codecs (codecs.index): a sorted index set of K positions out of n <->
bytes, and the positions the receiver will decode (equal to the input for
lossless codecs, the Bloom filter's selection otherwise).
value codecs (codecs.value): K values <-> bytes, and the permutation that
pairs decoded values with positions when the codec reorders them.

Every codec is declared once with `register` (codecs.base): name, kind, wire
id, aliases, parameters, summable / stateful / lossless / sorting / seeded /
carries_order. from_params, the deepreduce-bench flags, the payload's codec
ids and docs/codecs.md (markdown_table()) derive from it. The compressor
(deepreduce_tf.compressors) composes one codec of each kind with a sparsifier
and a memory.

    spec = codecs.get_spec("index", "gr")          # alias -> golomb's CodecSpec
    codecs.spec_by_wire_id("value", 3).name        # 'qsgd'
    codecs.make_index_codec("bloom", fpr=0.01)
"""
from deepreduce_tf.codecs.base import (KINDS, REGISTRY, SEED, Codec, CodecRegistry, CodecSpec,
                                       Param, register, spec_of)
from deepreduce_tf.codecs.page import REGENERATE_DOCS, markdown_table
from deepreduce_tf.codecs.index import (INDEX_ALIASES, INDEX_CODECS, IndexCodec, IndexEncoding,
                                        make_index_codec)
from deepreduce_tf.codecs.value import (VALUE_ALIASES, VALUE_CODECS, ValueCodec, ValueEncoding,
                                        make_value_codec)

get_spec = REGISTRY.get
lookup_spec = REGISTRY.lookup
spec_by_wire_id = REGISTRY.by_wire_id
specs = REGISTRY.specs
unregister = REGISTRY.unregister

__all__ = ["Codec", "CodecRegistry", "CodecSpec", "INDEX_ALIASES", "INDEX_CODECS", "IndexCodec",
           "IndexEncoding", "KINDS", "make_index_codec", "make_value_codec", "markdown_table",
           "Param", "REGENERATE_DOCS", "REGISTRY", "register", "SEED", "spec_by_wire_id",
           "spec_of", "get_spec", "lookup_spec", "specs", "unregister", "VALUE_ALIASES",
           "VALUE_CODECS", "ValueCodec", "ValueEncoding"]
