"""Flink's OperatorID for a ``uid``: how to name operators in snapshots that only store IDs.

Metadata before version 5 (Flink < 1.20 writes v3/v4) keeps no operator names or
uids, only 16-byte OperatorIDs. For an operator with ``.uid("...")``, Flink
derives the ID as the 128-bit MurmurHash3 (x64 variant, seed 0) of the uid's
UTF-8 bytes, in Guava's byte order (``h1`` then ``h2``, each little-endian);
the ID's hex string is those 16 bytes in order. So a user who knows their uids
can have them matched back to the IDs.
"""

from __future__ import annotations

from collections.abc import Iterable

_M64 = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    k ^= k >> 33
    return k


def murmur3_x64_128(data: bytes, seed: int = 0) -> bytes:
    """MurmurHash3 x64 128-bit, as Guava's ``Hashing.murmur3_128(seed)`` returns it (16 bytes)."""
    h1 = h2 = seed & _M64
    n = len(data)
    nblocks = n // 16
    for i in range(nblocks):
        k1 = int.from_bytes(data[16 * i : 16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8 : 16 * i + 16], "little")
        k1 = (_rotl((k1 * _C1) & _M64, 31) * _C2) & _M64
        h1 ^= k1
        h1 = (_rotl(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        k2 = (_rotl((k2 * _C2) & _M64, 33) * _C1) & _M64
        h2 ^= k2
        h2 = (_rotl(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[16 * nblocks :]
    k1 = k2 = 0
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        k2 = (_rotl((k2 * _C2) & _M64, 33) * _C1) & _M64
        h2 ^= k2
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        k1 = (_rotl((k1 * _C1) & _M64, 31) * _C2) & _M64
        h1 ^= k1
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    return h1.to_bytes(8, "little") + h2.to_bytes(8, "little")


def operator_id_for_uid(uid: str) -> str:
    """The OperatorID (32 hex digits, as in ``_metadata``) Flink gives an operator with this uid."""
    return murmur3_x64_128(uid.encode("utf-8")).hex()


#: (operator, state names it must hold): Flink's SQL runtime operators by the keyed states they register, as
#: Flink 2.3 snapshots name both (``sample_data/flink/production/sql-*``); an operator holding every name of
#: a row is that operator. (MATCH_RECOGNIZE is left out: its states are CEP's, shared with DataStream CEP.)
SQL_OPERATOR_STATES: tuple[tuple[str, frozenset[str]], ...] = (
    ("GroupAggregate", frozenset({"accState"})),
    ("Join", frozenset({"left-records", "right-records"})),
    ("IntervalJoin", frozenset({"IntervalJoinLeftCache", "IntervalJoinRightCache"})),
    ("Rank", frozenset({"data-state-with-append"})),
    ("Deduplicate", frozenset({"already-emitted-state-boolean", "waiting-to-emit-on-timer"})),
    ("Deduplicate", frozenset({"deduplicate-state"})),  # (keep last row on processing time)
)


def infer_operator_name(operator_id: str, state_names: Iterable[str]) -> str | None:
    """A name for an operator stored without name or uid (Flink 1.20 and older metadata; SQL operators
    have no uids to pass), from its keyed states: ``GroupAggregate[92d5105c]`` (the planner's kind and the
    head of the OperatorID, so that several operators of one kind stay apart), or None."""
    names = set(state_names)
    hits = sorted({op for op, need in SQL_OPERATOR_STATES if need <= names})
    return f"{hits[0]}[{operator_id[:8]}]" if len(hits) == 1 else None
