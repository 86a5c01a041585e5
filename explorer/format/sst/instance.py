"""The visible data of one RocksDB instance from its SST files: newest version per key, merge operands combined.

A RocksDB checkpoint (Flink's incremental or native savepoint handle, or the
engine's native files) is SST files (``NNNNNN.sst``), ``MANIFEST-*``,
``OPTIONS-*`` and ``CURRENT``. Flink and the engine keep one column family per
state, named after the state, so each SST belongs to one state (its
``rocksdb.column.family.name`` property). The same user key can occur in
several SST files (levels) with different sequence numbers; the newest wins.
List state is appended with *merge operands*: the visible list is the newest
put (if any, and not deleted) followed by the newer operands, oldest first,
joined with ``,`` - exactly RocksDB's string-append merge operator with
Flink's delimiter (the engine's list layout uses the same byte). What the keys
and values mean is the caller's: Flink's layout is decoded in
:mod:`explorer.readers.flink.rows`, the engine's in :mod:`explorer.format.rocksdb`.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .file import TYPE_DELETION, TYPE_MERGE, TYPE_SINGLE_DELETION, TYPE_VALUE, SstFile

DELIMITER = b","


@dataclass
class ColumnFamilyData:
    name: str
    keys: list[bytes]
    values: list[bytes]


def resolve(entries: list[tuple[list[bytes], list[int], list[int], list[bytes]]]) -> tuple[list[bytes], list[bytes], int]:
    """Visible (key, value) pairs of one column family across SST files; also the count of merged keys.

    The newest version of each key (highest sequence number) decides: a value is
    taken as is, a deletion hides the key, a merge operand is combined with the
    older versions down to the next value or deletion (only these keys are
    walked one by one).
    """

    keys: list[bytes] = []
    seqs: list[int] = []
    types: list[int] = []
    values: list[bytes] = []
    for k, s, t, v in entries:
        keys.extend(k)
        seqs.extend(s)
        types.extend(t)
        values.extend(v)
    n = len(keys)
    if not n:
        return [], [], 0
    t_arr = np.asarray(types, dtype=np.int64)
    if len(entries) == 1 and (t_arr == TYPE_VALUE).all():
        return keys, values, 0  # one file, only values: keys are already unique and sorted
    k_arr = np.empty(n, dtype=object)
    k_arr[:] = keys
    uniq, inv = np.unique(k_arr, return_inverse=True)
    s_arr = np.asarray(seqs, dtype=np.int64)
    order = np.lexsort((-s_arr, inv))  # by key, newest first
    inv_o = inv[order]
    starts = np.flatnonzero(np.r_[True, inv_o[1:] != inv_o[:-1]])
    ends = np.r_[starts[1:], n]
    newest = order[starts]
    t_new = t_arr[newest]
    out_k: list[bytes] = []
    out_v: list[bytes] = []
    merged = 0
    for g in np.flatnonzero((t_new == TYPE_VALUE) | (t_new == TYPE_MERGE)).tolist():
        i = int(newest[g])
        if t_new[g] == TYPE_VALUE:
            out_k.append(keys[i])
            out_v.append(values[i])
            continue
        merged += 1
        out_k.append(keys[i])
        out_v.append(combine([(types[j], values[j]) for j in order[starts[g] : ends[g]].tolist()]))
    return out_k, out_v, merged


def combine(versions: list[tuple[int, bytes]]) -> bytes:
    """The visible value of a key whose newest version is a merge operand; ``versions`` newest first.

    The operands down to the next value (the list's base) or deletion, oldest
    first, joined with ``,`` after the base.
    """
    operands: list[bytes] = []
    base: bytes | None = None
    for t, v in versions:
        if t == TYPE_MERGE:
            operands.append(v)
            continue
        if t == TYPE_VALUE:
            base = v
        elif t not in (TYPE_DELETION, TYPE_SINGLE_DELETION):
            continue
        break
    return DELIMITER.join(([base] if base is not None else []) + operands[::-1])


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
