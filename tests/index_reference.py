"""Numpy/pure-Python reference of the index-codec payload formats
(kernels/index/{index_format,rle,golomb}.h): exact bytes, written
independently of the kernels, plus the information bound and a validity
check for decoded sets."""
import math

import numpy as np

MAGIC = 0xDE
VERSION = 1
CODEC_IDS = {"int32": 1, "bitmap": 2, "rle": 3, "golomb": 4}


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_varint(data, pos):
    value = 0
    for i in range(9):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos
    raise ValueError("overlong varint")


def header(codec, n, k):
    return bytes([MAGIC, CODEC_IDS[codec], VERSION]) + varint(n) + varint(k)


def header_size(n, k):
    return len(header("int32", n, k))


def gaps(idx):
    idx = np.asarray(idx, dtype=np.int64)
    if len(idx) == 0:
        return idx
    return np.diff(idx, prepend=-1) - 1


def encode_int32(idx, n):
    return header("int32", n, len(idx)) + np.asarray(idx, dtype="<i4").tobytes()


def encode_bitmap(idx, n):
    bits = np.zeros(n, dtype=np.uint8)
    bits[np.asarray(idx, dtype=np.int64)] = 1
    return header("bitmap", n, len(idx)) + np.packbits(bits, bitorder="little").tobytes()


def rle_gap(v):
    if v <= 240:
        return bytes([v])
    if v <= 2287:
        w = v - 240
        return bytes([241 + (w >> 8), w & 0xFF])
    if v <= 67823:
        w = v - 2288
        return bytes([249, w >> 8, w & 0xFF])
    nbytes = max(3, (v.bit_length() + 7) // 8)
    return bytes([250 + nbytes - 3]) + v.to_bytes(nbytes, "big")


def encode_rle(idx, n):
    return header("rle", n, len(idx)) + b"".join(rle_gap(int(g)) for g in gaps(idx))


def rice_param(block):
    """Argmin over r of the block's exact Rice bit count (smallest on ties)."""
    d = np.diff(np.asarray(block, dtype=np.int64)) - 1
    if len(d) == 0:
        return 0, 0
    rs = np.arange(57, dtype=np.int64)
    costs = (d[:, None] >> rs).sum(axis=0) + len(d) * (1 + rs)
    r = int(np.argmin(costs))  # the first minimum: the smallest r on ties
    return r, int(costs[r])


def rice_block_bytes(block, r):
    d = np.diff(np.asarray(block, dtype=np.int64)) - 1
    acc, pos = 0, 0
    for g in d.tolist():
        q = g >> r
        pos += q
        acc |= 1 << pos  # the terminating one bit of the unary quotient
        pos += 1
        acc |= (g & ((1 << r) - 1)) << pos
        pos += r
    return acc.to_bytes((pos + 7) // 8, "little")


AUTO_LOG2_BLOCKS = range(4, 13)  # golomb.h kAutoMinLog2Block..kAutoMaxLog2Block


def golomb_body_bytes(idx, n, block_size):
    """Bytes after the common header: B, varint S, block table, stream."""
    idx = np.asarray(idx, dtype=np.int64)
    k = len(idx)
    s = sum((rice_param(idx[i:i + block_size])[1] + 7) // 8 for i in range(0, k, block_size))
    w_idx = (n - 1).bit_length() if n > 0 else 0
    nb = -(-k // block_size)
    return 1 + len(varint(s)) + (nb * (w_idx + s.bit_length() + 6) + 7) // 8 + s


def golomb_auto_block_size(idx, n):
    """The auto choice: smallest body over 2^4..2^12, ties to the larger."""
    best = None
    for log2b in AUTO_LOG2_BLOCKS:
        size = golomb_body_bytes(idx, n, 1 << log2b)
        if best is None or size <= best[0]:
            best = (size, 1 << log2b)
    return best[1]


def encode_golomb(idx, n, block_size=None):
    idx = np.asarray(idx, dtype=np.int64)
    k = len(idx)
    if block_size in (None, 0, "auto"):
        block_size = golomb_auto_block_size(idx, n)
    log2b = block_size.bit_length() - 1
    blocks = [idx[s:s + block_size] for s in range(0, k, block_size)]
    params, streams = [], []
    for blk in blocks:
        r, _ = rice_param(blk)
        params.append(r)
        streams.append(rice_block_bytes(blk, r))
    s = sum(len(x) for x in streams)
    w_idx = (n - 1).bit_length() if n > 0 else 0
    w_off = s.bit_length()
    acc, pos, off = 0, 0, 0
    for blk, r, st in zip(blocks, params, streams):
        for value, width in ((int(blk[0]), w_idx), (off, w_off), (r, 6)):
            acc |= value << pos
            pos += width
        off += len(st)
    table = acc.to_bytes((pos + 7) // 8, "little")
    return (header("golomb", n, k) + bytes([log2b]) + varint(s) + table +
            b"".join(streams))


def encode(codec, idx, n, block_size=None):
    if codec == "golomb":
        return encode_golomb(idx, n, block_size)
    return globals()[f"encode_{codec}"](idx, n)  # a codec's reference: encode_<name>


def log2_binomial(n, k):
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def parse_common_header(payload):
    """(codec id, version, n, K) or None if the common header is malformed."""
    data = bytes(payload)
    try:
        if len(data) < 5 or data[0] != MAGIC:
            return None
        n, pos = read_varint(data, 3)
        k, _ = read_varint(data, pos)
        return data[1], data[2], n, k
    except (IndexError, ValueError):
        return None


def is_valid_set(idx, n, k):
    idx = np.asarray(idx, dtype=np.int64)
    return (len(idx) == k and (len(idx) == 0 or (idx[0] >= 0 and idx[-1] < n)) and
            bool(np.all(np.diff(idx) > 0)))
