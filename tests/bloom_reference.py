"""Independent numpy implementation of the Bloom-filter index codec.

Written from the specification at the top of kernels/bloom/bloom.h and the
comment of SelectConflictSets in kernels/bloom/bloom_kernels.cc, not from the
kernel code: the tests require the kernels to match it bit for bit (filter
bytes, positives, selections). benchmarks/bloom_bench.py reuses insert/query
and the cheap policies as "the straightforward vectorized numpy
implementation", so those are whole-array numpy (query works in chunks of
positions to bound memory); conflict_sets is plain Python for small inputs.

Hash scheme kHashMix64Rot (all arithmetic modulo 2^64):
    a = Mix64(i + Mix64(seed ^ SEED_SALT)),  b = RotateLeft64(a, 32) | 1,
    bit_j = MulHi64(a + j * b, m)   for j = 0 .. h-1
Bit b of the filter is bit b % 8 of byte b // 8; the filter has
4 * ceil(m / 32) bytes and the bits at positions >= m are zero.
"""
import math

import numpy as np

SEED_SALT = 0x5851F42D4C957F2D
SELECT_SALT = 0x2545F4914F6CDD1D
MAX_HASHES = 32
POLICIES = ("p0", "leftmost", "random", "conflict_sets")

_MASK32 = np.uint64(0xFFFFFFFF)
_U32 = np.uint64(32)
_U33 = np.uint64(33)
_FMIX_C1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_QUERY_CHUNK = 1 << 20


def _u64(x):
    """uint64 array of x; Python ints are taken modulo 2^64 (so -1 -> 2^64 - 1)."""
    if isinstance(x, (int, np.integer)):
        return np.array([int(x) % (1 << 64)], dtype=np.uint64)
    return np.asarray(x).astype(np.uint64)  # two's complement for negative int64


def mix64(x):
    """MurmurHash3's fmix64 on a uint64 array (wrap-around arithmetic)."""
    x = _u64(x).copy()
    x ^= x >> _U33
    x *= _FMIX_C1
    x ^= x >> _U33
    x *= _FMIX_C2
    x ^= x >> _U33
    return x


def mix64_int(x):
    """mix64 of one Python int, as a Python int."""
    return int(mix64(x)[0])


def mulhi64(a, b):
    """High 64 bits of the 128-bit products a * b, from 32-bit halves."""
    a = _u64(a)
    b = _u64(b)
    a_lo, a_hi = a & _MASK32, a >> _U32
    b_lo, b_hi = b & _MASK32, b >> _U32
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    hi_hi = a_hi * b_hi
    # Each term is below 2^64 and so is their sum: (2^32-1)^2 + 2 (2^32-1) = 2^64 - 1.
    cross = (lo_lo >> _U32) + (hi_lo & _MASK32) + lo_hi
    return (hi_lo >> _U32) + (cross >> _U32) + hi_hi


def rotl32(x):
    """Rotation of a uint64 array by 32 bits (swaps the halves)."""
    return (x << _U32) | (x >> _U32)


def num_bytes(m):
    return 4 * ((int(m) + 31) // 32)


def filter_size(k, fpr):
    """REFERENCE 1.1 sizing with fpr rounded to float32 (the op attr's type)."""
    f = float(np.float32(fpr))
    m = math.ceil(k * math.log(1.0 / f) / (math.log(2.0) ** 2))
    h = math.ceil(math.log2(1.0 / f))
    return max(m, 1), min(max(h, 1), MAX_HASHES)


def probes(indices, m, h, seed=0):
    """The h bits of every index: uint64 array of shape [len(indices), h]."""
    a = mix64(_u64(indices) + np.uint64(mix64_int(int(seed) ^ SEED_SALT)))
    b = rotl32(a) | np.uint64(1)
    j = np.arange(h, dtype=np.uint64)
    return mulhi64(a[:, None] + j[None, :] * b[:, None], np.uint64(m))


def bits_to_bytes(bit_array, m):
    """Packs a boolean array of m bits into the filter's byte layout."""
    padded = np.zeros(num_bytes(m) * 8, dtype=bool)
    padded[:m] = bit_array
    return np.packbits(padded, bitorder="little")


def bytes_to_bits(filter_bytes, m):
    """Unpacks filter bytes into a boolean array of m bits (padding dropped)."""
    bits = np.unpackbits(np.asarray(filter_bytes, dtype=np.uint8), bitorder="little")
    return bits[:m].astype(bool)


def insert(indices, m, h, seed=0):
    """The filter bytes of a set of indices (uint8 array of num_bytes(m))."""
    bit_array = np.zeros(int(m), dtype=bool)
    idx = np.asarray(indices)
    if idx.size:
        bit_array[probes(idx, m, h, seed).ravel().astype(np.int64)] = True
    return bits_to_bytes(bit_array, m)


def contains(filter_bytes, indices, m, h, seed=0):
    """Boolean array: which of the indices the filter reports."""
    bit_array = bytes_to_bits(filter_bytes, m)
    idx = np.asarray(indices)
    if idx.size == 0:
        return np.zeros(0, dtype=bool)
    return bit_array[probes(idx, m, h, seed).astype(np.int64)].all(axis=1)


def query(filter_bytes, n, m, h, seed=0, dtype=np.int64):
    """All positions of [0, n) that the filter reports, ascending.

    Whole-array numpy over chunks of positions; after each probe only the
    positions still alive are hashed further.
    """
    bit_array = bytes_to_bits(filter_bytes, m)
    seed_mix = np.uint64(mix64_int(int(seed) ^ SEED_SALT))
    m64 = np.uint64(m)
    out = []
    for lo in range(0, int(n), _QUERY_CHUNK):
        pos = np.arange(lo, min(int(n), lo + _QUERY_CHUNK), dtype=np.uint64)
        a = mix64(pos + seed_mix)
        b = rotl32(a) | np.uint64(1)
        for j in range(int(h)):
            hit = bit_array[mulhi64(a + np.uint64(j) * b, m64).astype(np.int64)]
            pos, a, b = pos[hit], a[hit], b[hit]
            if pos.size == 0:
                break
        out.append(pos)
    if not out:
        return np.zeros(0, dtype=dtype)
    return np.concatenate(out).astype(dtype)


def random_policy_keys(positions, policy_seed=0):
    """RandomPolicyKey(seed, position) = Mix64(position + Mix64(seed ^ SELECT_SALT))."""
    salt = np.uint64(mix64_int(int(policy_seed) ^ SELECT_SALT))
    return mix64(_u64(positions) + salt)


def select_p0(positives, k):
    del k
    return np.asarray(positives).copy()


def select_leftmost(positives, k):
    return np.asarray(positives)[: int(k)].copy()


def select_random(positives, k, policy_seed=0):
    """The k positives with the smallest random-policy key, sorted by position."""
    positives = np.asarray(positives)
    keys = random_policy_keys(positives, policy_seed)
    # Mix64 is a bijection, so distinct positions have distinct keys.
    keep = np.argsort(keys, kind="stable")[: int(k)]
    return np.sort(positives[keep])


def conflict_sets_state(filter_bytes, positives, m, h, seed=0):
    """Per positive: its distinct bits; per bit: its conflict set (member ids)."""
    positives = [int(p) for p in np.asarray(positives)]
    rows = probes(positives, m, h, seed).tolist() if positives else []
    bit_array = bytes_to_bits(filter_bytes, m)
    distinct = []
    for i, row in enumerate(rows):
        own = []
        for bit in row:
            if not bit_array[bit]:
                raise ValueError(f"positives[{i}] = {positives[i]} is not a positive")
            if bit not in own:
                own.append(bit)
        distinct.append(own)
    members = {}
    for i, own in enumerate(distinct):
        for bit in own:
            members.setdefault(bit, []).append(i)
    return distinct, members


def certain_positives(filter_bytes, positives, m, h, seed=0):
    """Positives that are the only positive mapping to one of their bits.

    Every set bit was set by an inserted index, and every inserted index is a
    positive, so such a positive is certainly an inserted index.
    """
    positives = np.asarray(positives)
    distinct, members = conflict_sets_state(filter_bytes, positives, m, h, seed)
    own = {members[bit][0] for bit in members if len(members[bit]) == 1}
    return np.sort(positives[sorted(own)]) if own else positives[:0].copy()


def select_conflict_sets(filter_bytes, positives, k, m, h, seed=0):
    """Policy P2, as the comment of SelectConflictSets describes it.

    Conflict set of a bit = the positives mapping to it. Score of a positive =
    the size of its smallest conflict set. Visit the non-empty sets by
    (size, bit); from a set none of whose members is selected yet, select the
    member with the smallest (score, position). Then, if fewer than k are
    selected, add unselected positives by (score, position). Output sorted.
    """
    positives = np.asarray(positives)
    k = int(k)
    distinct, members = conflict_sets_state(filter_bytes, positives, m, h, seed)
    score = [min(len(members[bit]) for bit in own) for own in distinct]
    selected = [False] * len(distinct)
    covered = set()
    chosen = 0
    for bit in sorted(members, key=lambda b: (len(members[b]), b)):
        if chosen >= k:
            break
        if bit in covered:
            continue
        best = min(members[bit], key=lambda i: (score[i], i))
        selected[best] = True
        chosen += 1
        covered.update(distinct[best])
    if chosen < k:
        rest = sorted((i for i in range(len(distinct)) if not selected[i]),
                      key=lambda i: (score[i], i))
        for i in rest[: k - chosen]:
            selected[i] = True
    return positives[np.flatnonzero(np.array(selected, dtype=bool))] if selected \
        else positives[:0].copy()


def select(filter_bytes, positives, k, policy, m, h, seed=0, policy_seed=0):
    """Dispatch on the policy name (the op's `policy` attr)."""
    if policy == "p0":
        return select_p0(positives, k)
    if policy == "leftmost":
        return select_leftmost(positives, k)
    if policy == "random":
        return select_random(positives, k, policy_seed)
    if policy == "conflict_sets":
        return select_conflict_sets(filter_bytes, positives, k, m, h, seed)
    raise ValueError(f"unknown policy {policy!r}")


def theory_fill(m, h, k):
    """Expected fraction of set bits after inserting k indices with h hashes."""
    return 1.0 - math.exp(h * k * math.log1p(-1.0 / m))


def theory_fpr(m, h, k):
    """(1 - (1 - 1/m)^{hk})^h: probability that a non-inserted position is positive."""
    return theory_fill(m, h, k) ** h
