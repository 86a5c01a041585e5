"""Raw Snappy, with its stated length checked before anything is decompressed.

A raw Snappy block starts with the length of its decompressed bytes (a varint32). The
decompressor allocates that length up front, and it is written in Rust: when the
allocation fails it aborts the process rather than raising. So a damaged length must be
refused before it reaches the decompressor. Snappy expands at most about 21 times (a
3-byte copy of 64 bytes), so a stated length beyond :data:`MAX_EXPANSION` times the
block's size is damage; the framing format (Flink's snapshot compression) further caps
each chunk at 65,536 bytes.
"""

from __future__ import annotations

import cramjam

from .types import decode_varint

#: the most a raw Snappy block is taken to expand (its real limit is ~21x)
MAX_EXPANSION = 32
#: the framing format's limit on a chunk's uncompressed bytes
FRAMED_CHUNK_MAX = 65536


def stated_length(raw: bytes | memoryview) -> int | None:
    """The decompressed length a raw Snappy block states (its leading varint32), or None when
    the varint is cut off or longer than a varint32's 5 bytes."""
    try:
        n, end = decode_varint(raw, 0)
    except IndexError:
        return None
    return n if end <= 5 else None


def length_bound(size: int) -> int:
    """The most a raw Snappy block of ``size`` bytes can decompress to."""
    return MAX_EXPANSION * size + 64


def decompress_raw(raw: bytes | memoryview, where: str, error: type[Exception], limit: int | None = None) -> bytes:
    """Decompress the raw Snappy block ``raw``; ``error`` (raised naming ``where``) when its stated
    length is unreadable, beyond what Snappy can expand to (or beyond ``limit``), or when it does
    not decompress."""
    n = stated_length(raw)
    bound = length_bound(len(raw)) if limit is None else min(limit, length_bound(len(raw)))
    if n is None or n > bound:
        raise error(f"{where}: the Snappy block ({len(raw)} bytes) states "
                    f"{'an unreadable length' if n is None else f'{n} bytes decompressed'}; expected at most {bound}")
    try:
        return bytes(cramjam.snappy.decompress_raw(raw))
    except cramjam.DecompressionError as exc:
        raise error(f"{where}: the Snappy block ({len(raw)} bytes) does not decompress ({exc})") from exc
