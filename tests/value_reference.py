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
CODEC_IDS = {"polyfit": 1, "dexp": 2, "qsgd": 3, "fp16": 4, "bf16": 5, "deflate": 6}


def parse_header(payload):
    magic, codec, version, flags, k = HEADER.unpack_from(bytes(payload[:HEADER.size]))
    return dict(magic=magic, codec=codec, version=version, flags=flags, k=k)


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
    a, p, b, q = (float(c) for c in coefs)
    x = np.arange(n) / max(n - 1, 1)
    return a * np.exp(p * x) + b * np.exp(q * x)


def qsgd_levels(bits):
    return (1 << bits) - 1
