"""The columns analyses work on, with keys as integer codes, loaded once per Snapshot.

Most questions (key groups, rescaling, TTL, hot keys) need only ``operator,
state, kind, key, key_group, subtask, size_bytes, last_access, expires_at``,
and need the key only to tell keys apart. So for a Snapshot they are read
straight from the reader's Arrow pieces, once, and kept on the Snapshot
(:class:`~explorer.stored.AnalysisCache`; snapshots on disk do not change):

* ``key`` holds integer *codes* (``pyarrow.compute.dictionary_encode``, a C++ hash,
  instead of one Python object per row); :class:`KeyValues` turns the few codes an
  answer reports back into keys;
* ``operator``, ``state``, ``kind`` are Categoricals built from one name per piece;
* the ``value`` column is never converted to Python (sizes are already computed).

A frame of this kind carries its :class:`KeyValues` in ``DataFrame.attrs["key_values"]``;
a user's own DataFrame (Python keys) gets the same interface through
:func:`._keys.key_codes`, which factorizes its keys with pandas.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..keygroups import string_buffers
from ..readers.base import KeyedStateQuery, constant_values, piece_value
from ._keys import Deferred, KeyValues, factorize_keys
from ._ranges import RangeReader

#: columns the cached frame holds
CACHED_COLUMNS = frozenset({"operator", "state", "kind", "key", "key_group", "subtask", "size_bytes", "last_access",
                            "expires_at"})


def _cache(snap: Any) -> Any:
    """The :class:`~explorer.stored.AnalysisCache` of ``snap``, its frame loaded."""
    cache = snap.analysis_cache
    if not cache.loaded:
        cache.frame, cache.pieces, hashes = _load(snap)
        if hashes is not None:  # not in DataFrame.attrs: pandas deep-copies those into derived frames
            cache.row_hashes = hashes
    return cache


def load(snap: Any) -> Any:
    """:func:`_cache` by a public name, for :class:`._ranges.Pass` iterated ahead (``load=``)."""
    return _cache(snap)


def filter_key(operator: Any, state: Any) -> tuple:
    """Which operators and states rows were taken from, as part of a key of :func:`memo`."""
    def norm(x: Any) -> Any:
        return None if x is None else (frozenset([x]) if isinstance(x, str) else frozenset(x))
    return norm(operator), norm(state)


def memo(source: Any, key: tuple, build: Any) -> Any:
    """``build()`` once per Snapshot and ``key``: arrays derived from the cached columns (per-key
    totals, key hashes), kept beside them so a second analysis does not redo the first's work.

    ``key`` names what was built and from which rows (:func:`filter_key`; the scheme is
    :class:`~explorer.stored.AnalysisCache`'s). For a DataFrame source (no cache), or before
    the columns are loaded, ``build()`` runs every time. Snapshots on disk do not change; the
    cache goes with :meth:`~explorer.stored.StoredSnapshot.drop_analysis_cache`.
    """
    cache = None if isinstance(source, pd.DataFrame) else getattr(source, "analysis_cache", None)
    if cache is None or not cache.loaded:
        return build()
    return cache.memo(key, build)


def drop_derived(snap: Any) -> None:
    """Forget what :func:`memo` kept for ``snap`` (the loaded columns stay): the next analysis runs cold."""
    cache = snap.analysis_cache
    cache.derived.clear()
    kv = cache.frame.attrs.get("key_values") if cache.loaded else None
    if isinstance(kv, KeyValues):
        kv.forget()


def positions(snap: Any, operator: str | Iterable[str] | None = None,
              state: str | Iterable[str] | None = None) -> np.ndarray | None:
    """Rows of the cached frame of ``snap`` for these operators and states (None: all rows)."""
    pieces = _cache(snap).pieces
    ops = None if operator is None else ({operator} if isinstance(operator, str) else set(operator))
    sts = None if state is None else ({state} if isinstance(state, str) else set(state))
    if ops is None and sts is None:
        return None
    keep = [(lo, hi) for (op, st, lo, hi) in pieces if (ops is None or op in ops) and (sts is None or st in sts)]
    if len(keep) == len(pieces):
        return None
    return np.concatenate([np.arange(lo, hi) for lo, hi in keep]) if keep else np.zeros(0, dtype=np.int64)


def cached_frame(snap: Any, operator: str | Iterable[str] | None = None,
                 state: str | Iterable[str] | None = None) -> pd.DataFrame:
    """The analysis columns of ``snap`` (see the module doc), filtered by operator and state."""
    cache = _cache(snap)
    df = cache.frame
    idx = positions(snap, operator, state)
    if idx is None:
        df.attrs["spans"] = (len(df), tuple((op, st, lo, hi) for op, st, lo, hi in cache.pieces))
        return df
    out = df.iloc[idx].reset_index(drop=True)
    out.attrs["key_values"] = df.attrs["key_values"]
    ops = None if operator is None else ({operator} if isinstance(operator, str) else set(operator))
    sts = None if state is None else ({state} if isinstance(state, str) else set(state))
    spans, at = [], 0
    for op, st, lo, hi in cache.pieces:
        if (ops is None or op in ops) and (sts is None or st in sts):
            spans.append((op, st, at, at + hi - lo))
            at += hi - lo
    out.attrs["spans"] = (len(out), tuple(spans))
    return out


def state_rows(df: pd.DataFrame) -> list[tuple[str, str, np.ndarray | slice]]:
    """``(operator, state, rows)`` for each state in ``df``, sorted; rows as a slice or positions.

    Uses the piece spans of a cached frame (no pass over the rows) when ``df`` is one;
    factorizes the operator and state columns otherwise.
    """
    spans = df.attrs.get("spans")
    if spans is not None and spans[0] == len(df):
        by: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for op, st, lo, hi in spans[1]:
            by.setdefault((str(op), str(st)), []).append((lo, hi))
        out = []
        for (op, st), rs in sorted(by.items()):
            rows = slice(rs[0][0], rs[0][1]) if len(rs) == 1 else np.concatenate([np.arange(a, b) for a, b in rs])
            out.append((op, st, rows))
        return out
    if not len(df):
        return []
    op_codes, ops = pd.factorize(df["operator"], sort=True)
    st_codes, sts = pd.factorize(df["state"], sort=True)
    pair = op_codes.astype(np.int64) * len(sts) + st_codes
    counts = np.bincount(pair, minlength=len(ops) * len(sts))
    return [(str(ops[c // len(sts)]), str(sts[c % len(sts)]), np.flatnonzero(pair == c))
            for c in np.flatnonzero(counts)]


def row_hashes(snap: Any) -> np.ndarray:
    """A uint64 hash of each cached row's ``(namespace, user_key, value)``, computed in Arrow (cached)."""
    cache = _cache(snap)
    if cache.row_hashes is None:
        # the hashed columns are asked for by name: a reader that honours ``columns`` (Flink's) leaves out
        # what is not asked for, and the same rows in the same order come back either way
        wanted = tuple(sorted(CACHED_COLUMNS | _ENTRY_COLUMNS))
        parts = [_entry_hashes(p) for p in snap.reader.keyed_pieces(KeyedStateQuery(columns=wanted)) if p.num_rows]
        h = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
        if len(h) != len(cache.frame):  # pragma: no cover - a reader that is not deterministic
            raise RuntimeError(f"{snap.path}: keyed state changed between two reads ({len(h)} vs "
                               f"{len(cache.frame)} rows)")
        cache.row_hashes = h
    return cache.row_hashes


def _hashed_in_arrow(t: pa.DataType) -> bool:
    """Whether :func:`arrow_hash` hashes this type without a Python loop (lists and maps go through
    ``repr`` per value: not worth paying while loading, for a diff that may never come)."""
    if pa.types.is_struct(t):
        return all(_hashed_in_arrow(t.field(i).type) for i in range(t.num_fields))
    return not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t)
                or pa.types.is_fixed_size_list(t) or pa.types.is_union(t) or pa.types.is_dictionary(t))


_ENTRY_COLUMNS = frozenset({"namespace", "user_key", "value"})


def _entry_hashes(p: pa.Table) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (arrow_hash(p.column("value")) * _M1 + arrow_hash(p.column("user_key")) * _M2
                + arrow_hash(p.column("namespace")))


_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
_NULL = np.uint64(0x5851F42D4C957F2D)


def arrow_hash(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A uint64 hash per value of an Arrow column, equal for equal values of the same type."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    n = len(col)
    t = col.type
    if pa.types.is_null(t) or n == 0:
        return np.full(n, _NULL, dtype=np.uint64)
    nulls = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t) or pa.types.is_floating(t):
        filled = col.fill_null(pa.scalar(0, t) if not pa.types.is_boolean(t) else False) if nulls is not None else col
        h = _hash_numbers(filled.to_numpy(zero_copy_only=False))
    elif pa.types.is_struct(t):
        h = np.zeros(n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for i in range(t.num_fields):
                h = h * _M1 + arrow_hash(col.field(i))
    else:
        try:
            enc = pc.dictionary_encode(col)
            uniques = enc.dictionary.to_pandas().to_numpy(dtype=object)
            hu = pd.util.hash_array(uniques, categorize=False)
            idx = enc.indices.fill_null(0).to_numpy(zero_copy_only=False)
            h = hu[idx] if len(hu) else np.zeros(n, dtype=np.uint64)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            h = pd.util.hash_array(np.array([repr(v) for v in col.to_pylist()], dtype=object), categorize=False)
    if nulls is not None:
        h = np.where(nulls, _NULL, h)
    return h.astype(np.uint64, copy=False)


def _hash_numbers(vals: np.ndarray) -> np.ndarray:
    """:func:`pandas.util.hash_array` of a NumPy array of numbers, booleans or times; from
    :data:`KERNEL_ROWS` values its finalizer runs as one numba pass (:func:`._diff_kernels.pandas_mix`,
    the same values), numba being loaded by then for the keys anyway."""
    dt = vals.dtype
    if len(vals) < KERNEL_ROWS or dt.kind not in "biufmM" or dt.itemsize > 8:
        return pd.util.hash_array(vals)
    if dt.kind == "b":
        u = vals.astype(np.uint64)
    elif dt.kind in "mM":
        u = vals.view(np.int64).view(np.uint64)
    else:
        u = vals.view(f"u{dt.itemsize}")
        u = u if dt.itemsize == 8 else u.astype(np.uint64)
    from . import _diff_kernels

    out = np.empty(len(vals), dtype=np.uint64)
    _diff_kernels.pandas_mix(np.ascontiguousarray(u), out)
    return out


def _read_pieces(snap: Any) -> list[pa.Table]:
    """The non-empty pieces of the analysis columns, the one-value columns (operator, state, kind) given by
    value where the reader can (not built row by row), the entries too where the reader reads them cheaply
    (:attr:`~explorer.readers.base.SnapshotReader.entries_with_keys`)."""
    wanted = _wanted_columns(snap)
    light = wanted - _PER_PIECE | (_ENTRY_COLUMNS if snap.reader.entries_with_keys else frozenset())
    pieces = [p for p in snap.reader.keyed_pieces(KeyedStateQuery(columns=tuple(sorted(light)))) if p.num_rows]
    if all(piece_value(p, c) is not None for p in pieces for c in _PER_PIECE):
        return pieces
    # a reader that neither holds nor gives them: ask for the columns
    return [p for p in snap.reader.keyed_pieces(KeyedStateQuery(columns=tuple(sorted(wanted)))) if p.num_rows]


def _wanted_columns(snap: Any) -> frozenset:
    """The analysis columns to load for ``snap``: all of :data:`CACHED_COLUMNS`, or those a range view's
    one analysis uses (:attr:`._ranges.RangeReader.analysis_columns`; key, key group and the one-value
    columns always)."""
    only = snap.reader.analysis_columns if isinstance(snap.reader, RangeReader) else None
    if only is None:
        return CACHED_COLUMNS
    return frozenset(only) & CACHED_COLUMNS | {"key", "key_group"} | _PER_PIECE


_PER_PIECE = frozenset({"operator", "state", "kind"})


def _load(snap: Any) -> tuple[pd.DataFrame, list[tuple[str, str, int, int]], np.ndarray | None]:
    pieces = _read_pieces(snap)
    names: dict[str, list[Any]] = {"operator": [], "state": [], "kind": []}
    spans = []
    lo = 0
    for p in pieces:
        for c in names:
            names[c].append(piece_value(p, c))
        spans.append((names["operator"][-1], names["state"][-1], lo, lo + p.num_rows))
        lo += p.num_rows
    lengths = [p.num_rows for p in pieces]
    entry_columns = ("namespace", "user_key", "value")
    hashes = None
    if pieces and all(c in p.column_names and _hashed_in_arrow(p.schema.field(c).type)
                      for p in pieces for c in entry_columns):
        # the reader handed over the entries anyway: hash them now rather than read the files again for a diff
        hashes = np.concatenate([_entry_hashes(p) for p in pieces])
    loaded = _wanted_columns(snap)
    numeric = [c for c in ("key_group", "subtask", "size_bytes", "last_access", "expires_at") if c in loaded]
    if pieces:
        table = pa.concat_tables([p.select(numeric) for p in pieces], promote_options="permissive")
        df = table.to_pandas(split_blocks=True)
    else:
        df = pd.DataFrame({c: pd.Series(dtype=np.int64) for c in numeric})
    for i, c in enumerate(("operator", "state", "kind")):
        per_piece = _constant_per_piece(pieces, c, names[c])
        if per_piece:
            cats, codes = np.unique(np.array(names[c], dtype=object), return_inverse=True) if names[c] else ([], [])
            df.insert(i, c, pd.Categorical.from_codes(np.repeat(np.asarray(codes, dtype=np.int32), lengths),
                                                      categories=list(cats)))
        else:  # a reader whose pieces mix names: convert row by row
            df.insert(i, c, pd.Categorical(pa.chunked_array([p.column(c) for p in pieces]).to_pandas()))
    kg = df["key_group"].to_numpy() if "key_group" in df.columns else None
    codes, values = _encode_keys([p.column("key") for p in pieces], kg)
    df.insert(3, "key", codes)
    df.attrs["key_values"] = values
    return df, spans, hashes


def _constant_per_piece(pieces: list[pa.Table], column: str, firsts: list[Any]) -> bool:
    for p, v in zip(pieces, firsts):
        if column in constant_values(p):
            continue  # the reader gave the piece this one value: no need to compare every row
        col = p.column(column)
        if col.null_count or not pc.all(pc.equal(col, pa.scalar(v, col.type))).as_py():
            return False
    return True


def _encode_keys(columns: list[pa.ChunkedArray], key_groups: np.ndarray | None = None) -> tuple[np.ndarray, KeyValues]:
    """Codes for keys of every piece: one Arrow dictionary per key type, codes offset between types.

    ``key_groups``: the key group of every row of the pieces, in their order (the analysis frame's column),
    which lets pieces sorted by key group and key be numbered without a hash table (:func:`_numbered_strings`)."""
    by_type: dict[str, list[int]] = {}
    for i, c in enumerate(columns):
        by_type.setdefault(str(c.type), []).append(i)
    out = [None] * len(columns)
    segments: list[Any] = []
    hashes = None  # the one segment's key hashes, when the kernel numbered it (they come with its rows)
    seg: Any
    offset = 0
    for _, idx in by_type.items():
        chunks = [ch for i in idx for ch in columns[i].chunks]
        in_order = None
        if len(by_type) == 1 and key_groups is not None and len(key_groups) == sum(len(c) for c in columns):
            in_order = key_groups, np.cumsum([0] + [len(columns[i]) for i in idx], dtype=np.int64)
        numbered = _numbered_strings(chunks, columns[idx[0]].type, in_order)
        try:
            if numbered is not None:
                codes_all, seg, hashes = numbered
            else:
                # a null key (impossible in Flink, but what damaged bytes can decode to) is a dictionary
                # entry of its own: a masked index would become a negative code no count could index
                enc = pc.dictionary_encode(pa.chunked_array(chunks, type=columns[idx[0]].type),
                                           null_encoding="encode")
                dictionary = enc.chunk(0).dictionary if enc.num_chunks else pa.array([], type=columns[idx[0]].type)
                codes_all = np.concatenate([c.indices.to_numpy(zero_copy_only=False).astype(np.int64)
                                            for c in enc.chunks]) if enc.num_chunks else np.zeros(0, np.int64)
                seg = dictionary
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            values = pd.Series(pa.chunked_array(chunks).to_pylist(), dtype=object)
            values = values.map(lambda v: tuple(v) if isinstance(v, list) else v)
            codes_all, seg = factorize_keys(values)
        pos = 0
        for i in idx:
            n = len(columns[i])
            out[i] = codes_all[pos: pos + n] + offset
            pos += n
        segments.append(seg)
        offset += len(seg)
    codes = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    kv = KeyValues(segments)
    if len(segments) == 1 and hashes is not None:
        kv.keep_hash64(hashes)
    return codes, kv


#: rows of one key type from which :func:`_numbered_strings` numbers string keys with its kernel (fewer: Arrow's
#: ``dictionary_encode``, which needs no compiled kernel and is as quick on small ranges)
KERNEL_ROWS = 1 << 18


def _numbered_strings(chunks: list[pa.Array], t: pa.DataType, in_order: tuple[np.ndarray, np.ndarray] | None = None
                      ) -> tuple[np.ndarray, Any, np.ndarray] | None:
    """``dictionary_encode``'s codes and dictionary of string or binary keys without nulls, from the numba
    kernel :func:`._key_kernels.encode_strings` (a tenth of Arrow's time on millions of keys); the dictionary
    :class:`._keys.Deferred` (gathered when a key is first looked at). None where the Arrow path stays
    (other types, nulls, few rows, offsets the kernel refuses). Third: each dictionary key's 64-bit hash
    (:func:`._hashing.string_hash64`'s, taken from its first row), which a diff joins on without hashing again.

    ``in_order``: ``(key_groups, starts)``, the key group of each row and the first row of each piece (then
    the row count): where every piece is sorted by key group and key bytes, the same codes come from a merge
    of the pieces (:func:`._key_kernels.number_sorted`; on the 10^8-key savepoint's ranges 39 ms per 1.4 M rows
    with the check of the hashes, against the hash table's 55), checked rather than assumed
    (:func:`_numbered_in_order`)."""
    n = sum(len(c) for c in chunks)
    if n < KERNEL_ROWS or not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                               or pa.types.is_large_binary(t)) or any(c.null_count for c in chunks):
        return None
    from . import _diff_kernels, _key_kernels  # numba: loaded by the first large range, not by import explorer

    try:
        arr = pa.concat_arrays(chunks) if len(chunks) != 1 else chunks[0]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. more than 2 GiB of string data
        return None
    off, data = string_buffers(arr)
    h = np.empty(n, dtype=np.uint64)
    if not _diff_kernels.hash_strings(off, data, h):
        return None
    codes = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    k, hashes = _numbered_in_order(off, data, h, in_order, codes, first)
    if k < 0:
        k = _key_kernels.encode_strings(off, data, h, _bucket_bits(n), codes, first)
        if k < 0:
            return None
    rows = first[:k].copy()  # (the rest of ``first`` is not kept with the deferred dictionary)
    return codes, Deferred(k, lambda: arr.take(pa.array(rows)), source=arr, rows=rows), \
        h[rows] if hashes is None else hashes


def _bucket_bits(n: int) -> int:
    """The hash bits that cut ``n`` keys into buckets of about :data:`._key_kernels.BUCKET_ROWS`."""
    from . import _key_kernels

    return min(30, max(0, int(np.ceil(np.log2(max(1, n / _key_kernels.BUCKET_ROWS))))))


def _numbered_in_order(off: np.ndarray, data: np.ndarray, h: np.ndarray, in_order: tuple | None,
                       codes: np.ndarray, first: np.ndarray) -> tuple[int, np.ndarray | None]:
    """``(keys, their hashes)`` with ``codes`` and ``first`` filled as :func:`._key_kernels.encode_strings`
    fills them, from :func:`._key_kernels.number_sorted`; ``(-1, None)`` where it does not apply, for the
    hash table to number the keys: a piece out of (key group, key bytes) order, or a key found in two key
    groups (two codes from the merge: caught as a repeated hash among the keys', which a 64-bit collision
    of two keys also sends to the hash table), or key groups that are not integers."""
    if in_order is None:
        return -1, None
    kg, starts = in_order
    if kg.dtype not in (np.int32, np.int64):
        if kg.dtype.kind not in "iu" or kg.dtype.itemsize == 8:  # (floats: a column with nulls)
            return -1, None
        kg = kg.astype(np.int64)
    from . import _key_kernels

    k = _key_kernels.number_sorted(off, data, np.ascontiguousarray(kg), starts, codes, first)
    if k < 0:
        return -1, None
    hashes = h[first[:k]]
    if not _key_kernels.distinct_hashes(hashes, _bucket_bits(k)):
        return -1, None
    return k, hashes
