"""Bloom-filter index codec (REFERENCE 1.1): insert, query and select.

A set of K distinct indices out of [0, n) is encoded as a Bloom filter of m
bits with h hash functions. The receiver queries every position of [0, n);
the positives are the K indices plus about fpr * (n - K) false positives, and
a false-positive *policy* picks the decoded set among them:

  p0             every positive (the sender then sends a value for each);
  leftmost       the first K positives in index order;
  random         K positives chosen by a pure function of (policy_seed,
                 position): the same on every worker, no RNG state touched;
  conflict_sets  the positives that own a filter bit first (certainly
                 genuine), then the most likely others; always a subset of
                 the positives.

Every result is sorted. Indices are int32 or int64; int32 limits n to 2^31.
Scratch memory: insert and query use n/8 bytes (one bit per position).
"""
import collections

import numpy as np
import tensorflow as tf

from deepreduce_tf.ops import _loader

POLICIES = ("p0", "leftmost", "random", "conflict_sets")
HASH_ID = 1  # kHashMix64Rot in kernels/bloom/bloom.h

BloomFilter = collections.namedtuple("BloomFilter", ["bits", "num_bits", "num_hashes"])
BloomFilter.__doc__ = """A Bloom filter as produced by insert().

bits: uint8 vector of 4 * ceil(num_bits / 32) bytes (bit b is bit b % 8 of byte b / 8).
num_bits: int64 scalar m.  num_hashes: int64 scalar h."""


def _invalid(message):
    return tf.errors.InvalidArgumentError(None, None, message)


def _index_tensor(value, name):
    if isinstance(value, (list, tuple)) and len(value) == 0:
        value = np.zeros([0], np.int64)  # [] would otherwise become float32
    t = tf.convert_to_tensor(value)
    if t.dtype not in (tf.int32, tf.int64):
        raise _invalid(f"{name} must be int32 or int64, got {t.dtype.name}")
    if t.shape.rank is not None and t.shape.rank != 1:
        raise _invalid(f"{name} must be a vector, got shape {t.shape}")
    return t


def _int64_scalar(value, name):
    t = tf.convert_to_tensor(value)
    if not t.dtype.is_integer:
        raise _invalid(f"{name} must be an integer scalar, got {t.dtype.name}")
    if t.shape.rank is not None and t.shape.rank != 0:
        raise _invalid(f"{name} must be a scalar, got shape {t.shape}")
    return tf.cast(t, tf.int64)


def _check_count(value, name, valid, rule):
    """An explicit integer argument (not bool, not float) satisfying `valid`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _invalid(f"{name} must be an integer, got {value!r}")
    if not valid(value):
        raise _invalid(f"{name} must {rule}, got {value}")
    return int(value)


def _check_policy(policy):
    if policy not in POLICIES:
        raise ValueError(f"unknown Bloom-filter policy {policy!r}; valid choices: "
                         f"{', '.join(POLICIES)}")


def filter_size(k, fpr):
    """(m, h) that insert() picks for k indices at target rate fpr.

    REFERENCE 1.1: m = ceil(k ln(1/fpr) / ln(2)^2), h = ceil(log2(1/fpr)),
    computed in double precision from fpr rounded to float32 (the op's attr
    type), m at least 1, h in [1, 32].
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"fpr must lie in (0, 1), got {fpr}")
    f = float(np.float32(fpr))
    m = int(np.ceil(k * np.log(1.0 / f) / (np.log(2.0) ** 2)))
    h = int(np.ceil(np.log2(1.0 / f)))
    return max(m, 1), min(max(h, 1), 32)


def insert(indices, universe_size, fpr=0.01, num_bits=None, num_hashes=None, seed=0,
           name=None):
    """Builds the Bloom filter of a set of distinct indices.

    Args:
      indices: int32/int64 vector of K distinct indices in [0, universe_size),
        any order.
      universe_size: n, the number of positions (scalar).
      fpr: target false-positive rate in (0, 1); sizes m and h unless given.
      num_bits: m, if given explicitly (>= 1).
      num_hashes: h, if given explicitly (1..32).
      seed: hash seed; query and select must use the same one.

    Returns:
      BloomFilter(bits, num_bits, num_hashes).

    Raises:
      InvalidArgumentError: indices out of range or repeated, K > n, bad m/h/fpr,
        wrong dtype or rank.
    """
    indices = _index_tensor(indices, "indices")
    universe_size = _int64_scalar(universe_size, "universe_size")
    if num_bits is not None:
        num_bits = _check_count(num_bits, "num_bits", lambda v: v >= 1,
                                "be >= 1")
    if num_hashes is not None:
        num_hashes = _check_count(num_hashes, "num_hashes", lambda v: 1 <= v <= 32,
                                  "lie in [1, 32]")
    if (num_bits is None or num_hashes is None) and not 0.0 < fpr < 1.0:
        raise _invalid(f"fpr must lie in (0, 1), got {fpr}")
    bits, m, h = _loader.load().deep_reduce_bloom_filter_insert(
        indices, universe_size, fpr=fpr, num_bits=num_bits or 0,
        num_hashes=num_hashes or 0, seed=seed, name=name)
    return BloomFilter(bits, m, h)


def query(bloom_filter, universe_size, seed=0, out_idx=tf.int64, name=None):
    """All positions of [0, universe_size) that the filter reports, sorted.

    Returns:
      out_idx vector: the inserted indices plus the false positives.
    Raises:
      InvalidArgumentError: the byte count does not match num_bits, bits are set
        past num_bits, m or h out of range, or n too large for out_idx.
    """
    bits, m, h = bloom_filter
    return _loader.load().deep_reduce_bloom_filter_query(
        bits, _int64_scalar(universe_size, "universe_size"), _int64_scalar(m, "num_bits"),
        _int64_scalar(h, "num_hashes"), out_idx=out_idx, seed=seed, name=name)


def select(bloom_filter, positives, k, policy, seed=0, policy_seed=0, name=None):
    """Chooses the decoded index set among the positives by a policy.

    Args:
      bloom_filter: the BloomFilter the positives came from.
      positives: the output of query() for that filter.
      k: the number of indices that were inserted.
      policy: one of POLICIES.
      seed: the filter's hash seed (used by conflict_sets).
      policy_seed: seed of the random policy; equal on every worker.

    Returns:
      Sorted vector of the positives' dtype: k entries, or all positives for p0.
    """
    _check_policy(policy)
    bits, m, h = bloom_filter
    positives = _index_tensor(positives, "positives")
    return _loader.load().deep_reduce_bloom_filter_select(
        bits, positives, _int64_scalar(m, "num_bits"), _int64_scalar(h, "num_hashes"),
        _int64_scalar(k, "k"), policy=policy, seed=seed, policy_seed=policy_seed,
        name=name)


def decode(bloom_filter, universe_size, k, policy="conflict_sets", seed=0, policy_seed=0,
           out_idx=tf.int64):
    """query() then select(): the receiver's whole decode."""
    _check_policy(policy)
    positives = query(bloom_filter, universe_size, seed=seed, out_idx=out_idx)
    return select(bloom_filter, positives, k, policy, seed=seed, policy_seed=policy_seed)
