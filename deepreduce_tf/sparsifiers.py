"""Sparsifiers: a flat gradient -> the positions it sends (GRACE's compressor).

  topk       the k = ceil(compress_ratio * n) largest magnitudes (exact,
             ties by index); deterministic. skip_zeros=True never selects
             a zero: k = min(ceil(compress_ratio * n), non-zeros) (what
             it leaves out decodes to the same tensor at fewer bytes).
  randomk    k uniformly random positions, a pure function of (seed, n, k):
             every worker draws the same positions for the same step.
  threshold  every position with |x| >= threshold (data-dependent K).
  none       every position (the tensor travels dense).

Every sparsifier returns strictly increasing int64 positions.

Buckets (deepreduce_tf.fusion): select_segments(x, lengths, seed) selects
over a flat bucket whose sparse section concatenates several variables.
topk and randomk keep k = ceil(ratio * n_i) per variable by default
(scope='variable', GRACE's and DeepReduce's semantics, so published results
stay comparable) with ONE segmented kernel over the bucket; scope='bucket'
selects ceil(ratio * N) over the whole bucket instead (a global top-k).
threshold is element-wise and none keeps everything, with or without
segments.
"""
import abc
import collections

import numpy as np
import tensorflow as tf

from deepreduce_tf.ops import fusion as fusion_ops
from deepreduce_tf.ops import sparsify as sparsify_ops


class Sparsifier(abc.ABC):
    """Base class. `dense` is True for the identity sparsifier."""

    name = None
    dense = False
    # True if the positions depend only on (n, step, seed), not on the data:
    # workers then agree on them and values can be summed (all-reduce).
    data_independent = False

    @abc.abstractmethod
    def select(self, x, seed):
        """x: flat float tensor [n] (static n); seed: int64 scalar that
        changes every step. Returns int64 [K] strictly increasing positions."""

    # True if select() decides element by element (threshold, none): then a
    # bucket's segments do not matter and select() runs once over the bucket.
    elementwise = False

    def select_segments(self, x, lengths, seed):
        """x: flat float tensor, the concatenation of segments of the given
        static `lengths` (one per variable); seed as in select(). Returns
        int64 strictly increasing positions into x.

        Default: select() over the whole bucket for an element-wise
        sparsifier, else select() on each segment (per-variable semantics for
        a sparsifier of your own; the built-in topk/randomk use one segmented
        kernel instead)."""
        if self.elementwise or len(lengths) == 1:
            return self.select(x, seed)
        parts, start = [], 0
        for length in lengths:
            idx = self.select(x[start:start + length], seed)
            parts.append(tf.cast(idx, tf.int64) + start)
            start += length
        return tf.concat(parts, 0)

    def select_values(self, x, seed):
        """(select(x, seed), x at those positions). The built-in sparsifiers
        take the values from their selection kernel, which has them at hand;
        a gather afterwards reads x at K random places (a cache miss each on
        a large bucket)."""
        idx = self.select(x, seed)
        return idx, fusion_ops.gather(x, idx)

    def select_segments_values(self, x, lengths, seed):
        """(select_segments(x, lengths, seed), x at those positions)."""
        idx = self.select_segments(x, lengths, seed)
        return idx, fusion_ops.gather(x, idx)

    def _overrides(self, cls, *names):
        """True if this object's class, a subclass of the built-in `cls`,
        overrides any of cls's methods `names`: the built-in *_values fast
        paths then go through the override instead of cls's kernels."""
        return any(getattr(type(self), n) is not getattr(cls, n) for n in names)

    def _override_segments_values(self, cls, x, lengths, seed):
        """select_segments_values for a subclass of `cls` that overrides
        select_segments or only select (then select per segment)."""
        if self._overrides(cls, "select_segments"):
            idx = self.select_segments(x, lengths, seed)
        else:
            idx = Sparsifier.select_segments(self, x, lengths, seed)
        return idx, fusion_ops.gather(x, idx)

    def config(self):
        return {}

    def __repr__(self):
        cfg = ", ".join(f"{k}={v!r}" for k, v in sorted(self.config().items()))
        return f"{type(self).__name__}({cfg})"


def _ratio(compress_ratio):
    try:
        ratio = float(compress_ratio)
    except (TypeError, ValueError):
        raise ValueError(f"compress_ratio must be a number in (0, 1], got {compress_ratio!r}")
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"compress_ratio must lie in (0, 1], got {compress_ratio!r}")
    return ratio


SCOPES = ("variable", "bucket")


def _scope(scope):
    if scope not in SCOPES:
        raise ValueError(f"topk_scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return scope


class TopK(Sparsifier):
    name = "topk"

    def __init__(self, compress_ratio=0.01, scope="variable", skip_zeros=False):
        self.compress_ratio = _ratio(compress_ratio)
        self.scope = _scope(scope)
        if not isinstance(skip_zeros, bool):
            raise ValueError(f"topk_skip_zeros must be True or False, got {skip_zeros!r}")
        self.skip_zeros = skip_zeros

    def config(self):
        cfg = {"compress_ratio": self.compress_ratio, "scope": self.scope}
        if self.skip_zeros:
            cfg["skip_zeros"] = True
        return cfg

    def select(self, x, seed):
        return self.select_values(x, seed)[0]

    def select_values(self, x, seed):
        if self._overrides(TopK, "select"):
            return Sparsifier.select_values(self, x, seed)
        if self.skip_zeros:
            n = int(x.shape.num_elements())
            return self._segmented(x, [n], sparsify_ops.segment_ks([n], self.compress_ratio))
        return sparsify_ops.top_k_ratio(x, self.compress_ratio)

    # select_ratio() exists: the compressor's exponential warm-up may use it.
    def select_segments(self, x, lengths, seed):
        return self.select_segments_values(x, lengths, seed)[0]

    def select_segments_values(self, x, lengths, seed):
        if self._overrides(TopK, "select", "select_segments"):
            return self._override_segments_values(TopK, x, lengths, seed)
        if self.scope == "bucket" or len(lengths) == 1:
            return self.select_values(x, seed)
        return self._segmented(x, list(lengths),
                               sparsify_ops.segment_ks(lengths, self.compress_ratio))

    def _segmented(self, x, lengths, ks):
        """segmented_top_k over segments of static `lengths` with ks (numpy
        or a tensor), capped by each segment's non-zeros with skip_zeros.
        Returns (positions, values)."""
        offsets = np.cumsum([0] + list(lengths), dtype=np.int64)
        ks = tf.convert_to_tensor(ks, tf.int64)
        if self.skip_zeros:
            nonzero = tf.cast(tf.not_equal(tf.reshape(x, [-1]), 0), tf.int64)
            count = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(nonzero)], 0)
            ks = tf.minimum(ks, fusion_ops.gather(count, offsets[1:])
                            - fusion_ops.gather(count, offsets[:-1]))
        return sparsify_ops.segmented_top_k(x, tf.constant(offsets), ks)

    def select_ratio(self, x, lengths, ratio):
        """select_segments with a run-time ratio (a float64 scalar tensor in
        (0, 1]) instead of compress_ratio: k = min(n, max(1, ceil(ratio * n)))
        per segment (per bucket with scope 'bucket'), the rule of
        sparsify.k_for_ratio."""
        return self.select_ratio_values(x, lengths, ratio)[0]

    def select_ratio_values(self, x, lengths, ratio):
        """(select_ratio(x, lengths, ratio), x at those positions)."""
        lengths = [int(x.shape.num_elements())] if self.scope == "bucket" else list(lengths)
        n = tf.constant(lengths, tf.int64)
        k = tf.cast(tf.math.ceil(ratio * tf.cast(n, tf.float64)), tf.int64)
        return self._segmented(x, lengths, tf.minimum(n, tf.maximum(tf.constant(1, tf.int64), k)))


def _segments(lengths, ratio):
    offsets = np.cumsum([0] + list(lengths), dtype=np.int64)
    ks = sparsify_ops.segment_ks(lengths, ratio)
    return tf.constant(offsets, tf.int64), tf.constant(ks, tf.int64)


class RandomK(Sparsifier):
    name = "randomk"
    data_independent = True

    def __init__(self, compress_ratio=0.01, scope="variable"):
        self.compress_ratio = _ratio(compress_ratio)
        self.scope = _scope(scope)

    def config(self):
        return {"compress_ratio": self.compress_ratio, "scope": self.scope}

    def select(self, x, seed):
        return self.select_values(x, seed)[0]

    def select_values(self, x, seed):
        if self._overrides(RandomK, "select"):
            return Sparsifier.select_values(self, x, seed)
        return sparsify_ops.random_k_ratio(x, self.compress_ratio, seed)

    def select_segments(self, x, lengths, seed):
        return self.select_segments_values(x, lengths, seed)[0]

    def select_segments_values(self, x, lengths, seed):
        if self._overrides(RandomK, "select", "select_segments"):
            return self._override_segments_values(RandomK, x, lengths, seed)
        if self.scope == "bucket" or len(lengths) == 1:
            return self.select_values(x, seed)
        offsets, ks = _segments(lengths, self.compress_ratio)
        return sparsify_ops.segmented_random_k(x, offsets, ks, seed)


class Threshold(Sparsifier):
    name = "threshold"
    elementwise = True

    def __init__(self, threshold=0.01):
        try:
            t = float(threshold)
        except (TypeError, ValueError):
            raise ValueError(f"threshold must be a number >= 0, got {threshold!r}")
        if not t >= 0.0:
            raise ValueError(f"threshold must be >= 0, got {threshold!r}")
        self.threshold = t

    def config(self):
        return {"threshold": self.threshold}

    def select(self, x, seed):
        return self.select_values(x, seed)[0]

    def select_values(self, x, seed):
        if self._overrides(Threshold, "select"):
            return Sparsifier.select_values(self, x, seed)
        return sparsify_ops.threshold(x, tf.constant(self.threshold, x.dtype))

    def select_segments_values(self, x, lengths, seed):
        if self._overrides(Threshold, "select", "select_segments"):
            return self._override_segments_values(Threshold, x, lengths, seed)
        return self.select_values(x, seed)  # element-wise: segments do not matter


class NoSparsifier(Sparsifier):
    name = "none"
    elementwise = True
    dense = True
    data_independent = True

    def select(self, x, seed):
        return tf.range(tf.size(x, out_type=tf.int64), dtype=tf.int64)


SPARSIFIERS = collections.OrderedDict(
    (c.name, c) for c in (TopK, RandomK, Threshold, NoSparsifier))
SPARSIFIER_ALIASES = {"top_k": "topk", "random_k": "randomk", "random": "randomk",
                      "identity": "none", "dense": "none"}


def make_sparsifier(name, **kwargs):
    """A sparsifier by name (SPARSIFIERS or SPARSIFIER_ALIASES)."""
    key = SPARSIFIER_ALIASES.get(name, name)
    if key not in SPARSIFIERS:
        raise ValueError(f"unknown compressor (sparsifier) {name!r}; valid choices: "
                         f"{', '.join(SPARSIFIERS)}")
    return SPARSIFIERS[key](**kwargs)
