"""Snappy as Flink and RocksDB use it, through ``cramjam`` (a maintained binding).

* Flink's *snapshot compression* (``execution.checkpointing.snapshot-compression``)
  wraps each key group's bytes (heap format: each state within each key group)
  in the Snappy *framing format*: chunks of ``type (1 byte) + length (3 bytes,
  little-endian) + data``. Type ``0xFF`` is the stream identifier
  ``sNaPpY``, ``0x00`` a compressed chunk (4-byte masked CRC-32C, then raw
  Snappy), ``0x01`` an uncompressed chunk (CRC, then the bytes); ``0x02``-``0x7F``
  are reserved (an error), ``0x80``-``0xFE`` are skippable. The CRC is the masked
  CRC-32C of the chunk's *uncompressed* bytes and is checked. Several framed
  streams may follow each other; :func:`unframe` decodes a run of them into one
  byte string.
* RocksDB compresses SST blocks with raw Snappy (block trailer type 1).
"""

from __future__ import annotations

from ...errors import FlinkCorruptError, FlinkFormatError
from ...format import snappy
from ...format.checksums import masked_crc32c


def unframe(buf: bytes | memoryview, start: int, end: int) -> bytes:
    """Decode the Snappy-framed bytes ``buf[start:end]`` (one or more framed streams)."""
    out = []
    p = start
    mv = memoryview(buf)
    while p + 4 <= end:
        ctype = mv[p]
        n = mv[p + 1] | (mv[p + 2] << 8) | (mv[p + 3] << 16)
        body = p + 4
        if body + n > end:
            raise FlinkCorruptError(f"Snappy frame at offset {p} claims {n} bytes, only {end - body} left")
        if ctype in (0x00, 0x01):
            if n < 4:
                raise FlinkCorruptError(f"Snappy chunk at offset {p} holds {n} bytes, less than its 4-byte CRC")
            if ctype == 0x00:
                data = snappy.decompress_raw(mv[body + 4 : body + n], f"the Snappy chunk at offset {p}",
                                             FlinkCorruptError, limit=snappy.FRAMED_CHUNK_MAX)
            else:
                data = bytes(mv[body + 4 : body + n])
            stored = int.from_bytes(mv[body : body + 4], "little")
            computed = masked_crc32c(data)
            if computed != stored:
                raise FlinkCorruptError(f"the Snappy chunk at offset {p} ({n} bytes) has masked CRC-32C "
                                        f"{computed:#010x}, its header records {stored:#010x} (damaged)")
            out.append(data)
        elif ctype == 0xFF or ctype >= 0x80:
            pass  # stream identifier or skippable chunk
        else:
            raise FlinkFormatError(f"reserved Snappy frame type {ctype:#04x} at offset {p}")
        p = body + n
    if p != end:
        raise FlinkCorruptError(f"{end - p} stray bytes after the last Snappy frame (offset {p})")
    return b"".join(out)


def snappy_raw(data: bytes | memoryview) -> bytes:
    return snappy.decompress_raw(data, "a raw Snappy block", FlinkCorruptError)
