"""Keyed state of one RocksDB instance from its native/incremental snapshot handle.

An incremental (or native savepoint) handle names a *meta data* stream (the
keyed-backend header, ``statemeta``) and the files of a RocksDB checkpoint:
SST files (``NNNNNN.sst``), ``MANIFEST-*``, ``OPTIONS-*``, ``CURRENT``. Shared
files (reused by later incremental checkpoints) live in ``shared/``; private
ones in ``chk-N/`` or inline in ``_metadata``.

Flink keeps one column family per state, named after the state, so each SST
belongs to one state (its ``rocksdb.column.family.name`` property). Keys and
values use the key/value layout of ``rows``. The same user key can occur in
several SST files (levels) with different sequence numbers; the newest wins.
List state is appended with *merge operands*: the visible list is the newest
put (if any, and not deleted) followed by the newer operands, oldest first,
joined with ``,`` - exactly RocksDB's string-append merge operator with
Flink's delimiter.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .sst import TYPE_DELETION, TYPE_MERGE, TYPE_SINGLE_DELETION, TYPE_VALUE, SstFile

DELIMITER = b","


@dataclass
class ColumnFamilyData:
    name: str
    keys: list[bytes]
    values: list[bytes]


def resolve(entries: list[tuple[list[bytes], list[int], list[int], list[bytes]]]) -> tuple[list[bytes], list[bytes], int]:
    """Visible (key, value) pairs of one column family across SST files; also the count of merged keys."""
    keys: list[bytes] = []
    seqs: list[int] = []
    types: list[int] = []
    values: list[bytes] = []
    for k, s, t, v in entries:
        keys.extend(k)
        seqs.extend(s)
        types.extend(t)
        values.extend(v)
    simple = len(set(keys)) == len(keys) and all(t == TYPE_VALUE for t in types)
    if simple:
        return keys, values, 0
    versions: dict[bytes, list[tuple[int, int, bytes]]] = defaultdict(list)
    for k, s, t, v in zip(keys, seqs, types, values):
        versions[k].append((s, t, v))
    out_k: list[bytes] = []
    out_v: list[bytes] = []
    merged = 0
    for k in sorted(versions):
        vs = sorted(versions[k], key=lambda x: -x[0])
        operands: list[bytes] = []
        base: bytes | None = None
        for _, t, v in vs:
            if t == TYPE_MERGE:
                operands.append(v)
                continue
            if t == TYPE_VALUE:
                base = v
            elif t not in (TYPE_DELETION, TYPE_SINGLE_DELETION):
                continue
            break
        if base is None and not operands:
            continue
        if operands:
            merged += 1
            parts = ([base] if base is not None else []) + operands[::-1]
            out_v.append(DELIMITER.join(parts))
        else:
            out_v.append(base)
        out_k.append(k)
    return out_k, out_v, merged


def read_instance(sst_files: list[tuple[str, bytes]]) -> tuple[dict[str, ColumnFamilyData], dict[str, int]]:
    """Visible data per column family of one RocksDB instance; stats for notes."""
    per_cf: dict[str, list] = defaultdict(list)
    stats = {"sst_files": 0, "merged_keys": 0, "range_deletions": 0}
    for name, data in sst_files:
        f = SstFile(data, name)
        e = f.entries()
        stats["sst_files"] += 1
        if f.has_range_deletions:
            stats["range_deletions"] += 1
        per_cf[e.column_family or "default"].append((e.keys, e.seqs, e.types, e.values))
    out = {}
    for cf, parts in per_cf.items():
        k, v, merged = resolve(parts)
        stats["merged_keys"] += merged
        out[cf] = ColumnFamilyData(cf, k, v)
    return out, stats
