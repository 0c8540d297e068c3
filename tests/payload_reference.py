"""Pure-Python reference of the payload container and the permutation format
(kernels/payload/payload_format.h), written from the format description and
sharing no code with the package: a bitwise CRC32C, an LEB128 varint, a
packer, and the permutation bit packer."""
import numpy as np

MAGIC = b"DRPK"
VERSION = 1
CRC32C_POLY_REFLECTED = 0x82F63B78


def crc32c(data):
    """CRC32C one bit at a time (reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in bytes(data):
        crc ^= byte
        for _ in range(8):
            if crc & 1:
                crc = (crc >> 1) ^ CRC32C_POLY_REFLECTED
            else:
                crc >>= 1
    return crc ^ 0xFFFFFFFF


def varint(value):
    assert 0 <= value < 1 << 63
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def pack(sections, meta, kind=1, crc=crc32c):
    """bytes of the container holding `sections` (list of bytes) and `meta`.
    `crc` computes the trailer (the bitwise crc32c is slow on megabytes)."""
    head = bytearray(MAGIC) + bytes([VERSION, kind])
    head += varint(len(meta)) + b"".join(varint(v) for v in meta)
    head += varint(len(sections)) + b"".join(varint(len(s)) for s in sections)
    body = bytes(head) + b"".join(bytes(s) for s in sections)
    return body + crc(body).to_bytes(4, "little")


def with_crc(body):
    """body plus its CRC32C trailer: forge a payload whose checksum is right."""
    body = bytes(body)
    return body + crc32c(body).to_bytes(4, "little")


def perm_bits(k):
    return 0 if k <= 1 else int(k - 1).bit_length()


def perm_encode(perm):
    """bytes: each entry in perm_bits(K) bits, LSB-first, zero-padded."""
    k = len(perm)
    b = perm_bits(k)
    values = np.asarray(perm, dtype=np.int64).reshape(k, 1)
    bits = ((values >> np.arange(b, dtype=np.int64)) & 1).astype(np.uint8).ravel()
    return np.packbits(bits, bitorder="little").tobytes()


def perm_decode(data, k):
    b = perm_bits(k)
    bits = np.unpackbits(np.frombuffer(bytes(data), dtype=np.uint8), bitorder="little")
    weights = (1 << np.arange(b, dtype=np.int64))
    return (bits[:k * b].reshape(k, b).astype(np.int64) * weights).sum(axis=1)
