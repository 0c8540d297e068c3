"""make_exchange(sparsifier, index_codec, value_codec, memory, communicator,
...): the composition of earlier versions in one call.

The compressor is stateless (deepreduce_tf.compressor.Compressor:
sparsifier + index codec + value codec); the state a step keeps (memory,
step counters, warm-up, clipping, the byte ledger) is held beside it by an
exchange.Exchange, together with the communicator. make_exchange() builds
exactly that pair, the object from_params() returns: compress /
decompress / compress_batch / compress_slices, .memory, .ledger,
.communicator. (Earlier versions called it Compressor, the name of the
stateless class.)
"""
from deepreduce_tf import compressor as _compressor
from deepreduce_tf import fusion
from deepreduce_tf.compressor import (BATCH_FIELDS, BUCKET_FIELDS, BUCKET_SECTIONS,  # noqa: F401
                                      DEFAULT_MIN_SIZE, DTYPE_CODES, IDENTITY_MISMATCH,
                                      KIND_BUCKET, META_FIELDS, MODE_DENSE, MODE_SLICES,
                                      MODE_SPARSE, NONFINITE_CHOICES, NUM_SECTIONS,
                                      WARMUP_CHOICES, BatchContext, BucketContext, Context,
                                      SlicesContext)
from deepreduce_tf.exchange.allgather import Allgather
from deepreduce_tf.exchange.endpoint import Exchange


def make_exchange(sparsifier, index_codec=None, value_codec=None, memory=None,
                  communicator=None, min_size=DEFAULT_MIN_SIZE, nonfinite="dense", seed=0,
                  ledger="default", variable_factory=None, name=None,
                  bucket_cap_mb=fusion.DEFAULT_BUCKET_CAP_MB, warmup_steps=0, warmup="dense",
                  clip_norm=None, hierarchical=True):
    """sparsifier + index codec + value codec, with memory and a communicator
    (default all-gather): an exchange.Exchange around a stateless
    compressor.Compressor. The arguments are those of both (see there)."""
    return Exchange(
        _compressor.Compressor(sparsifier, index_codec, value_codec, min_size=min_size,
                               nonfinite=nonfinite, seed=seed, bucket_cap_mb=bucket_cap_mb),
        memory=memory, communicator=communicator if communicator is not None else Allgather(),
        ledger=ledger, variable_factory=variable_factory, warmup_steps=warmup_steps,
        warmup=warmup, clip_norm=clip_norm, name=name, hierarchical=hierarchical)


__all__ = ["BATCH_FIELDS", "BUCKET_FIELDS", "BUCKET_SECTIONS", "DEFAULT_MIN_SIZE", "DTYPE_CODES",
           "IDENTITY_MISMATCH", "KIND_BUCKET", "META_FIELDS", "MODE_DENSE", "MODE_SLICES",
           "MODE_SPARSE", "NONFINITE_CHOICES", "NUM_SECTIONS", "WARMUP_CHOICES", "BatchContext",
           "BucketContext", "Context", "SlicesContext", "make_exchange"]
