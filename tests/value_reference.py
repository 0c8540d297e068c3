"""Numpy reference implementations of the value codecs (tests only).

They follow the definitions in kernels/value/*.h independently of the C++
code: segmentation and least squares here use numpy's lstsq on a Chebyshev
Vandermonde matrix, not the kernels' streaming Givens QR.
"""
import math
import struct

import numpy as np

HEADER = struct.Struct("<2sBBIQ")  # magic, codec id, version, flags, K
MAGIC = b"DV"
CODEC_IDS = {"polyfit": 1, "dexp": 2, "qsgd": 3, "fp16": 4, "bf16": 5, "deflate": 6,
             "ternary": 7}


def parse_header(payload):
    magic, codec, version, flags, k = HEADER.unpack_from(bytes(payload[:HEADER.size]))
    return dict(magic=magic, codec=codec, version=version, flags=flags, k=k)


def header(codec, k):
    return HEADER.pack(MAGIC, CODEC_IDS[codec], 1, 0, k)


# The payload of a codec whose ops take no parameters: <name>_encode_reference.

def fp16_encode_reference(values):
    """Finite values: IEEE half, round to nearest even (numpy's cast)."""
    return header("fp16", len(values)) + np.asarray(values, np.float32).astype("<f2").tobytes()


def bf16_encode_reference(values):
    """Finite values: bfloat16, round to nearest even on the float32 bits."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    half = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
    return header("bf16", len(values)) + half.tobytes()


def ternary_encode_reference(values, bucket=512):
    """STC's section, written from its definition: per bucket of `bucket`
    values the mean magnitude (float32, the mean in float64 then rounded),
    then one sign bit per value (1 = negative; bit i % 8 of byte i // 8)."""
    v = np.asarray(values, np.float32)
    means = [np.mean(np.abs(v[i:i + bucket]).astype(np.float64))
             for i in range(0, len(v), bucket)]
    bits = np.packbits((v < 0).astype(np.uint8), bitorder="little")
    return np.asarray(means, "<f4").tobytes() + bits.tobytes()


def ternary_decode_reference(section, count, bucket=512):
    buckets = -(-count // bucket)
    means = np.frombuffer(section[:4 * buckets], "<f4")
    signs = np.unpackbits(np.frombuffer(section[4 * buckets:], np.uint8),
                          bitorder="little")[:count]
    return np.where(signs > 0, -1.0, 1.0).astype(np.float32) * np.repeat(means, bucket)[:count]


def sort_desc(values):
    """Descending signed order, ties by input position (the kernels' order)."""
    values = np.asarray(values, np.float32)
    return np.lexsort((np.arange(values.size), -values.astype(np.float64)))


def auto_segments(k):
    """Default segment count: about the original GPU code's 10 at K = 10k, 16 at 250k."""
    if k <= 1:
        return 1
    return max(1, int(round(1.3 * math.log2(k))) - 7)


def sign_split(sorted_values):
    """Number of values >= 0 in a descending sequence (start of the negatives)."""
    return int(np.count_nonzero(sorted_values >= 0))


def geometric_bounds(length, segs, from_end):
    """Segment lengths of one sign part: log-spaced boundaries, the shortest
    segments at the extreme end (the start for positives, the end for negatives)."""
    segs = max(1, min(segs, length))
    b = [0]
    for j in range(1, segs + 1):
        x = int(round((length + 1.0) ** (j / segs))) - 1
        x = max(x, b[-1] + 1)
        x = min(x, length - (segs - j))
        b.append(x)
    b[-1] = length
    lens = list(np.diff(b))
    return lens[::-1] if from_end else lens


def split_counts(total, pos, neg):
    if pos == 0 or neg == 0:
        return (total, 0) if neg == 0 else (0, total)
    total = max(total, 2)
    sp = int(round(total * pos / (pos + neg)))
    sp = min(max(sp, 1), total - 1)
    return sp, total - sp


def geometric_segments(y, segs):
    k = y.size
    if k == 0:
        return []
    p = sign_split(y)
    sp, sn = split_counts(segs, p, k - p)
    out = []
    if p:
        out += geometric_bounds(p, sp, from_end=False)
    if k - p:
        out += geometric_bounds(k - p, sn, from_end=True)
    return out


def best_split(y, lo, hi, degree):
    """(distance, j): the point of [lo, hi) farthest (vertically) from the chord
    between its end points; the segment is cut after j. Segments that a
    degree-d polynomial fits exactly are never cut."""
    n = hi - lo
    if n <= degree + 1 or n < 3:
        return 0.0, -1
    yy = y[lo:hi].astype(np.float64)
    t = np.arange(n, dtype=np.float64) / (n - 1)
    chord = yy[0] + (yy[-1] - yy[0]) * t
    d = np.abs(yy - chord)
    d[0] = d[-1] = -1.0
    j = int(np.argmax(d))
    return float(d[j]), lo + j


def greedy_segments(y, segs, degree):
    k = y.size
    if k == 0:
        return []
    p = sign_split(y)
    parts = [(0, p), (p, k)] if 0 < p < k else [(0, k)]
    segments = []
    for lo, hi in parts:
        dist, j = best_split(y, lo, hi, degree)
        segments.append([lo, hi, dist, j])
    while len(segments) < segs:
        i = max(range(len(segments)), key=lambda s: (segments[s][2], -s))
        lo, hi, dist, j = segments[i]
        if dist <= 0.0:
            break
        left = [lo, j + 1, *best_split(y, lo, j + 1, degree)]
        right = [j + 1, hi, *best_split(y, j + 1, hi, degree)]
        segments[i:i + 1] = [left, right]
    return [s[1] - s[0] for s in segments]


def abscissae(n):
    if n == 1:
        return np.zeros(1)
    return (2.0 * np.arange(n) - (n - 1)) / (n - 1)


def polyfit_reference(values, degree=5, segmentation="greedy", segments=0):
    """Returns (perm, lengths, coefficient list, decoded values in sorted order)."""
    values = np.asarray(values, np.float32)
    perm = sort_desc(values)
    y = values[perm].astype(np.float64)
    segs = segments or auto_segments(y.size)
    if segmentation == "greedy":
        lens = greedy_segments(y, segs, degree)
    else:
        lens = geometric_segments(y, segs)
    coefs, out, lo = [], [], 0
    for n in lens:
        d = min(degree, n - 1)
        t = abscissae(n)
        v = np.polynomial.chebyshev.chebvander(t, d)
        c = np.linalg.lstsq(v, y[lo:lo + n], rcond=None)[0].astype(np.float32)
        coefs.append(c)
        out.append(np.polynomial.chebyshev.chebval(t, c.astype(np.float64)))
        lo += n
    dec = np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)
    return perm, lens, coefs, dec


def dexp_part_reference(y):
    """Jacquelin's integral-equation fit of y(x) = a e^{px} + b e^{qx} on
    x = j / (n - 1); returns (a, p, b, q) in float64."""
    n = y.size
    if n == 0:
        return 0.0, 0.0, 0.0, 0.0
    if n == 1:
        return float(y[0]), 0.0, 0.0, 0.0
    x = np.arange(n) / (n - 1)
    s = np.concatenate([[0.0], np.cumsum((y[1:] + y[:-1]) / 2 * np.diff(x))])
    ss = np.concatenate([[0.0], np.cumsum((s[1:] + s[:-1]) / 2 * np.diff(x))])
    m = np.stack([ss, s, x, np.ones(n)], axis=1)
    (a_, b_, _, _), *_ = np.linalg.lstsq(m, y, rcond=None)
    disc = b_ * b_ + 4 * a_
    mean = float(np.mean(y))
    best = (mean, 0.0, 0.0, 0.0)
    best_err = float(np.sum((y - mean) ** 2))
    if disc >= 0:
        p = (b_ + math.sqrt(disc)) / 2
        q = (b_ - math.sqrt(disc)) / 2
        basis = np.stack([np.exp(p * x), np.exp(q * x)], axis=1)
        (a, b), *_ = np.linalg.lstsq(basis, y, rcond=None)
        err = float(np.sum((basis @ [a, b] - y) ** 2))
        if np.isfinite(err) and err < best_err:
            best = (float(a), float(p), float(b), float(q))
    return best


def dexp_eval(coefs, n):
    """Magnitudes of one part (clamped at 0, as the decoder does)."""
    a, p, b, q = (float(c) for c in coefs)
    x = np.arange(n) / max(n - 1, 1)
    return np.maximum(a * np.exp(p * x) + b * np.exp(q * x), 0.0)


def dexp_decode_reference(payload):
    """Decodes a dexp payload in numpy (descending value order)."""
    buf = bytes(payload)
    k = parse_header(buf)["k"]
    (p,) = struct.unpack_from("<Q", buf, 16)
    pos = struct.unpack_from("<4f", buf, 24)
    neg = struct.unpack_from("<4f", buf, 40)
    return np.concatenate([dexp_eval(pos, p), -dexp_eval(neg, k - p)[::-1]]).astype(np.float32)


# ---------------------------------------------------------------- QSGD --

M64 = (1 << 64) - 1


def mix64(x):
    """MurmurHash3 fmix64 on a numpy uint64 array (wrapping arithmetic)."""
    x = np.asarray(x, np.uint64).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xff51afd7ed558ccd)
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xc4ceb9fe1a85ec53)
        x ^= x >> np.uint64(33)
    return x


QSGD_SALT = 0x6a09e667f3bcc909


def qsgd_code_bits(s):
    return int(s).bit_length() + 1


def qsgd_encode_reference(values, s, bucket, seed, rounding="stochastic"):
    """The exact payload bytes of QsgdEncode (rounding='nearest': of
    QsgdValue(rounding='nearest'), each level the nearest, half up)."""
    v = np.asarray(values, np.float32)
    k = v.size
    nb = -(-k // bucket)
    scales = np.zeros(nb, np.float32)
    for b in range(nb):
        chunk = v[b * bucket:(b + 1) * bucket]
        scales[b] = np.max(np.abs(chunk)) if chunk.size else 0
    seed_mix = mix64(np.uint64((seed & M64) ^ QSGD_SALT))
    with np.errstate(over="ignore"):
        h = mix64(np.arange(k, dtype=np.uint64) + seed_mix)
    u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    sc = np.repeat(scales, bucket)[:k].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(sc > 0, np.abs(v.astype(np.float64)) / sc * s, 0.0)
    if rounding == "nearest":
        level = np.minimum(np.floor(r + 0.5), s)
    else:
        fl = np.minimum(np.floor(r), s)
        level = fl + ((fl < s) & (u < r - fl))
    level = level.astype(np.uint64)
    w = qsgd_code_bits(s)
    sign = ((level != 0) & (v < 0)).astype(np.uint64)
    code = level | (sign << np.uint64(w - 1))
    bits = ((code[:, None] >> np.arange(w, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    packed = np.packbits(bits.reshape(-1), bitorder="little")
    head = HEADER.pack(MAGIC, CODEC_IDS["qsgd"], 1, 0, k) + struct.pack("<II", s, bucket)
    return np.frombuffer(head + scales.tobytes() + packed.tobytes(), np.uint8)


def qsgd_decode_reference(payload):
    buf = bytes(payload)
    k = parse_header(buf)["k"]
    s, bucket = struct.unpack_from("<II", buf, 16)
    nb = -(-k // bucket)
    scales = np.frombuffer(buf, np.float32, nb, 24).astype(np.float64)
    w = qsgd_code_bits(s)
    bits = np.unpackbits(np.frombuffer(buf, np.uint8, offset=24 + 4 * nb), bitorder="little")
    bits = bits[:k * w].reshape(k, w).astype(np.uint64)
    code = (bits << np.arange(w, dtype=np.uint64)).sum(axis=1)
    level = (code & np.uint64((1 << (w - 1)) - 1)).astype(np.float64)
    sign = (code >> np.uint64(w - 1)).astype(bool)
    mag = (np.repeat(scales, bucket)[:k] * level / s).astype(np.float32)
    return np.where(sign, -mag, mag)


def qsgd_expected_sq_error(values, s, bucket):
    """Per-bucket E||Q(v) - v||^2 = sum frac(r)(1 - frac(r)) (M / s)^2."""
    v = np.asarray(values, np.float64)
    out = []
    for b in range(-(-v.size // bucket)):
        c = np.abs(v[b * bucket:(b + 1) * bucket])
        m = c.max()
        if m == 0:
            out.append(0.0)
            continue
        r = c / m * s
        f = r - np.floor(r)
        out.append(float(np.sum(f * (1 - f)) * (m / s) ** 2))
    return np.array(out)
