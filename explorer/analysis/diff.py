"""Diff of two snapshots: keys added, removed and changed, and growth per key and per state.

A key's content in one state is the set of its entries ``(namespace, user_key,
value)``; each entry is hashed (``pandas.util.hash_array``; values that are
dicts or lists hash through ``str``) and a key's fingerprint is the wrapping
sum of its entries' hashes. Two snapshots' keys are matched by value after a
joint :func:`pandas.factorize`, so no Python loop runs per key. For two
Snapshots the same runs over their cached analysis columns: entries hashed
column-wise in Arrow (:func:`._columns.arrow_hash`), the two Arrow key
dictionaries joined through hash tables of 64-bit key hashes slice by slice of
key groups, every match checked byte by byte (:func:`_joint_by_hash`), per-key
sums run by run (:func:`_side_keys`) and the two sides merged per state, in
numba kernels (:mod:`._diff_kernels`, imported on first use) on two threads. A key is

* ``added``: in ``b`` only; ``removed``: in ``a`` only;
* ``changed``: in both with a different fingerprint or entry count;
* ``unchanged``: otherwise (last-access times alone do not count as a change).
"""

from __future__ import annotations

import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import AnalysisError
from ..keygroups import string_buffers
from ..stored import open_stored
from . import _ranges
from ._columns import cached_frame, positions, row_hashes, state_rows
from ._common import KEY_PASS_COLUMNS, Source, frame, is_snapshot
from ._keys import KeyValues, factorize_keys, first_occurrences

DIFF_COLUMNS = ["operator", "state", "key", "status", "entries_a", "entries_b", "entries_delta", "bytes_a",
                "bytes_b", "bytes_delta"]
STATUSES = ("added", "removed", "changed", "unchanged")

_COLUMNS = ("operator", "state", "kind", "key", "namespace", "user_key", "value", "size_bytes")
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


def _hash(col: pd.Series) -> np.ndarray:
    arr = col.to_numpy()
    try:
        return pd.util.hash_array(arr, categorize=False)
    except TypeError:
        return pd.util.hash_array(col.map(repr).to_numpy(dtype=object), categorize=False)


def _row_hashes(df: pd.DataFrame) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _hash(df["value"]) * _M1 + _hash(df["user_key"]) * _M2 + _hash(df["namespace"])


def diff(a: Source, b: Source, *, operator: str | Iterable[str] | None = None,
         state: str | Iterable[str] | None = None, unchanged: bool = True) -> pd.DataFrame:
    """Per (operator, state, key): status and growth from snapshot ``a`` to snapshot ``b``.

    Columns: ``operator, state, key, status, entries_a, entries_b, entries_delta,``
    ``bytes_a, bytes_b, bytes_delta``; sorted by operator, state and falling ``bytes_delta``;
    ``status`` is a Categorical of :data:`STATUSES`; ``key`` is the Arrow-backed string dtype
    :data:`KEY_STRINGS` (pandas 3's default for strings) when every key is a str, Python objects
    otherwise. ``unchanged=False`` leaves the unchanged keys out. ``a`` and ``b`` may be paths
    (opened as :func:`explorer.open` would), as :func:`explorer.history` takes them.
    """
    a = open_stored(a) if isinstance(a, (str, Path)) else a
    b = open_stored(b) if isinstance(b, (str, Path)) else b
    if is_snapshot(a) and is_snapshot(b) and hasattr(a, "reader") and hasattr(b, "reader"):
        if _ranges.needs_ranges(a, operator, state, b) and _same_key_groups(a, b):
            return _diff_streamed(a, b, operator, state, unchanged)
        return _diff_snapshots(a, b, operator, state, unchanged)
    fa = frame(a, _COLUMNS, operator, state)
    fb = frame(b, _COLUMNS, operator, state)
    both = pd.concat([fa, fb], ignore_index=True)
    side = np.concatenate([np.zeros(len(fa), np.int8), np.ones(len(fb), np.int8)])
    if not len(both):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    key_codes, keys = factorize_keys(both["key"])
    os_codes, os_uniques = pd.factorize(pd.MultiIndex.from_arrays([both["operator"], both["state"]]))
    group, _ = pd.factorize(os_codes.astype(np.int64) * (len(keys) + 1) + key_codes)
    n = int(group.max()) + 1
    first = first_occurrences(group)
    h = _row_hashes(both)
    size = both["size_bytes"].to_numpy(dtype=np.float64)
    ent, byt, fp = [], [], []
    for s in (0, 1):
        sel = side == s
        g = group[sel]
        ent.append(np.bincount(g, minlength=n).astype(np.int64))
        byt.append(np.rint(np.bincount(g, weights=size[sel], minlength=n)).astype(np.int64))
        fp.append(_group_sums(g, h[sel], n))
    in_a, in_b = ent[0] > 0, ent[1] > 0
    status = np.where(~in_a, "added", np.where(~in_b, "removed",
                      np.where((fp[0] != fp[1]) | (ent[0] != ent[1]), "changed", "unchanged")))
    ops = np.array([t[0] for t in os_uniques], dtype=object)
    sts = np.array([t[1] for t in os_uniques], dtype=object)
    strings = pd.api.types.infer_dtype(keys, skipna=False) == "string"  # every key a str: KEY_STRINGS
    out = pd.DataFrame({
        "operator": ops[os_codes[first]], "state": sts[os_codes[first]], "key": keys[key_codes[first]],
        "status": status, "entries_a": ent[0], "entries_b": ent[1], "entries_delta": ent[1] - ent[0],
        "bytes_a": byt[0], "bytes_b": byt[1], "bytes_delta": byt[1] - byt[0],
    })
    if not unchanged:
        out = out[out["status"] != "unchanged"]
    out = out.sort_values(["operator", "state", "bytes_delta"], ascending=[True, True, False], kind="stable")
    out["status"] = pd.Categorical(out["status"], categories=list(STATUSES))
    out = out.reset_index(drop=True)[DIFF_COLUMNS]
    if strings:
        out["key"] = pd.array(out["key"].to_numpy(dtype=object), dtype=KEY_STRINGS)
    return out


def diff_key_groups(a: Any, b: Any, lo: int, hi: int, key_groups: Iterable[int] | None = None, *,
                    operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
                    unchanged: bool = True) -> pd.DataFrame:
    """:func:`diff` of two StoredSnapshots restricted to key groups ``lo..hi`` (``key_groups``: only these of
    them), each side reading that range only (Parquet row groups, Flink key-group offsets).

    Every entry of a key lies in the key's one key group, the same in both snapshots when their max
    parallelism is the same, so the diff of a snapshot is the concatenation of its ranges' diffs: what
    :mod:`explorer.distributed.datasource`'s ``aggregate=diff`` partitions compute, one range each."""
    return diff(_ranges.view(a, lo, hi, key_groups), _ranges.view(b, lo, hi, key_groups), operator=operator,
                state=state, unchanged=unchanged)


def _joint_codes(kva: KeyValues, kvb: KeyValues, groups=None) -> tuple[np.ndarray, np.ndarray]:
    """Map b's key codes into a's code space; b-only keys get codes after a's.

    Returns ``(translation, new_from_b)``: ``translation[code_b]`` is the joint code and
    ``new_from_b[j]`` the b code of joint code ``len(kva) + j``. Kept on ``kva`` for as long
    as ``kvb`` lives (a second diff of the same snapshots, filtered, does not join again).
    ``groups``: called (only when the join is computed) for each side's key group per code,
    which makes the join faster (:func:`_joint_by_hash`).
    """
    kept = kva.joins.get(id(kvb))
    if kept is not None and kept[0]() is kvb:
        return kept[1]
    out = _joint_codes_of(kva, kvb, *(groups() if groups is not None else (None, None)))
    kva.joins = {k: v for k, v in kva.joins.items() if v[0]() is not None}
    kva.joins[id(kvb)] = (weakref.ref(kvb), out)
    return out


def _joint_codes_of(kva: KeyValues, kvb: KeyValues, groups_a: np.ndarray | None = None,
                    groups_b: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    tr = _joint_by_hash(kva, kvb, groups_a, groups_b)
    if tr is None:
        tr = _joint_by_lookup(kva, kvb)
    new = np.flatnonzero(tr < 0)
    tr[new] = len(kva) + np.arange(len(new))
    return tr, new


def _hashable(v: Any) -> Any:
    """``v`` with dicts, lists and sets turned into tuples (equal values stay equal, differing ones differ)."""
    if isinstance(v, dict):
        return ("__dict__",) + tuple((k, _hashable(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_hashable(x) for x in v)
    if isinstance(v, (set, frozenset)):
        return ("__set__",) + tuple(sorted((_hashable(x) for x in v), key=repr))
    return v


def _hashable_keys(seg: np.ndarray) -> np.ndarray:
    out = np.empty(len(seg), dtype=object)
    out[:] = [_hashable(v) for v in seg]
    return out


def _joint_by_lookup(kva: KeyValues, kvb: KeyValues) -> np.ndarray:
    """b code -> a code (-1: not in a), looking b's keys up in a's (Arrow hash tables)."""
    tr = np.full(len(kvb), -1, dtype=np.int64)
    for off_b, seg_b in zip(kvb.offsets[:-1], kvb.segments):
        for off_a, seg_a in zip(kva.offsets[:-1], kva.segments):
            if isinstance(seg_b, np.ndarray) or isinstance(seg_a, np.ndarray):
                if isinstance(seg_b, np.ndarray) and isinstance(seg_a, np.ndarray):
                    try:
                        found = pd.Index(seg_a).get_indexer(seg_b)
                    except TypeError:  # unhashable keys (a PyFlink Row key decodes to a dict): compare by value
                        found = pd.Index(_hashable_keys(seg_a)).get_indexer(_hashable_keys(seg_b))
                else:
                    continue
            else:
                if seg_a.type != seg_b.type:
                    continue
                where = pc.index_in(seg_b, value_set=seg_a)
                found = where.fill_null(-1).to_numpy(zero_copy_only=False)
            hit = found >= 0
            sl = tr[off_b: off_b + len(seg_b)]
            sl[hit & (sl < 0)] = off_a + found[hit & (sl < 0)]
    return tr


def _joint_by_hash(kva: KeyValues, kvb: KeyValues, groups_a: np.ndarray | None = None,
                   groups_b: np.ndarray | None = None) -> np.ndarray | None:
    """b code -> a code (-1: not in a) through hash tables of 64-bit key hashes, each match
    confirmed by comparing the two keys' bytes (:mod:`._diff_kernels`).

    None when the keys are not one Arrow array of strings, binaries or integers of the same
    type on both sides, or when the hashes do not spread the keys (probe chains past a budget
    of :data:`_PROBE_BUDGET` steps per key): then :func:`_joint_by_lookup`. A hash collision
    costs probe steps, never a wrong match.

    ``groups_a``/``groups_b``, when given, hold a group number per code (the key group of
    the key's rows): if both rise with the codes (keys are coded in the order rows are
    written, key group by key group), the codes are cut into slices of whole groups and each
    slice of a is joined with b's slice of the same groups, through a hash table that fits in
    the CPU cache; half of the slices on a second thread. Keys left unmatched on both sides
    are then joined again all together, so a key whose group differs between the sides
    (another max parallelism) is still found: the groups decide only how fast the join is,
    never its answer.
    """
    if len(kva.segments) != 1 or len(kvb.segments) != 1:
        return None
    seg_a, seg_b = kva.segments[0], kvb.segments[0]
    if isinstance(seg_a, np.ndarray) or isinstance(seg_b, np.ndarray) or seg_a.type != seg_b.type:
        return None
    bytes_a, bytes_b = _key_bytes(seg_a), _key_bytes(seg_b)
    if bytes_a is None or bytes_b is None:
        return None
    ha, hb = _both_hashes(kva, kvb)
    if ha is None or hb is None:
        return None
    na, nb = len(ha), len(hb)
    tr = np.full(nb, -1, dtype=np.int64)
    if not na or not nb:
        return tr
    from . import _diff_kernels as kernels

    found = np.zeros(na, dtype=bool)
    slices = np.array(_slices(groups_a, groups_b, na, nb), dtype=np.int64).reshape(-1, 4)
    budget = _PROBE_BUDGET * (na + nb) + (1 << 16)

    def join(some: np.ndarray) -> int:
        return kernels.join_slices(ha, hb, *bytes_a, *bytes_b, some, tr, found, budget)

    if len(slices) > 1:  # slices write to their own parts of tr and found: half of them on a second thread
        rc = min(_both(lambda: join(slices[0::2]), lambda: join(slices[1::2])))
        if rc == kernels.OK:  # keys whose groups differ between the sides: join what is left, all together
            la, lb = np.flatnonzero(~found), np.flatnonzero(tr < 0)
            if len(la) and len(lb):
                rc = kernels.join_rows(ha, hb, *bytes_a, *bytes_b, la, lb, tr, found, budget)
    else:
        rc = join(slices)
    if rc == kernels.OVER_BUDGET:
        return None
    if rc != kernels.OK:
        raise AnalysisError(f"key dictionaries of {len(seg_a)} and {len(seg_b)} {seg_a.type} keys: offsets or "
                            "codes out of range (expected rising offsets within the data buffer)")
    return tr


#: probe steps per key a key join may take before it looks the keys up another way
_PROBE_BUDGET = 64


def _key_bytes(seg: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """``(offsets, data)``: key ``i`` is ``data[offsets[i]:offsets[i + 1]]``; strings and binaries
    as in their Arrow buffers, integers as 8 little-endian bytes (None for other types or nulls)."""
    t = seg.type
    if seg.null_count:
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return string_buffers(seg)
    if pa.types.is_integer(t):
        values = np.ascontiguousarray(seg.cast(pa.int64()).to_numpy(zero_copy_only=False))
        return np.arange(0, 8 * len(values) + 1, 8, dtype=np.int64), values.view(np.uint8)
    return None


_SLICE_KEYS = 1 << 17


def _slices(groups_a: np.ndarray | None, groups_b: np.ndarray | None, na: int,
            nb: int) -> list[tuple[int, int, int, int]]:
    """``(a0, a1, b0, b1)`` code ranges of whole groups, about ``_SLICE_KEYS`` codes of a each
    (one range of everything when the groups are not given or do not rise with the codes)."""
    whole = [(0, na, 0, nb)]
    if groups_a is None or groups_b is None or na <= _SLICE_KEYS:
        return whole
    if not (bool((groups_a[1:] >= groups_a[:-1]).all()) and bool((groups_b[1:] >= groups_b[:-1]).all())):
        return whole
    cuts = np.unique(groups_a[np.arange(_SLICE_KEYS, na, _SLICE_KEYS)])
    cuts = cuts[cuts > groups_a[0]]
    ea = np.concatenate([[0], np.searchsorted(groups_a, cuts), [na]])
    eb = np.concatenate([[0], np.searchsorted(groups_b, cuts), [nb]])
    return [(int(ea[i]), int(ea[i + 1]), int(eb[i]), int(eb[i + 1])) for i in range(len(ea) - 1)]


def _both_hashes(kva: KeyValues, kvb: KeyValues) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Both sides' key hashes, b's on a second thread when neither is kept yet."""
    if kva is kvb or kva.has_hash64() or kvb.has_hash64():
        return kva.hash64(), kvb.hash64()
    return _both(kva.hash64, kvb.hash64)


def _both(f, g) -> tuple:
    """``(f(), g())``, ``g`` on a second thread: NumPy, Arrow and the numba kernels (``nogil``)
    release the GIL in their loops, so two halves of the work run side by side on two cores."""
    with ThreadPoolExecutor(1, thread_name_prefix="diff") as pool:
        later = pool.submit(g)
        return f(), later.result()


def _side_keys(codes: np.ndarray, rows: np.ndarray | slice | list, h: np.ndarray, size: np.ndarray,
               n_codes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per key of one state on one side: ``(codes, entries, bytes, fingerprint)``, codes rising.

    The fingerprint is the wrapping uint64 sum of the key's entry hashes. ``rows``: the
    state's rows, as ``(lo, hi)`` spans (read in place), a slice or positions. The usual
    layouts are summed run by run in one pass (:func:`._diff_kernels.side_sums`): a value
    state's one entry per key, a list or map state's entries written key by key; anything
    else per code through a table of all codes.
    """
    from . import _diff_kernels as kernels

    codes, h, size, spans = _spans_of(codes, rows, h, size)
    integral = np.issubdtype(size.dtype, np.integer)
    codes = codes.astype(np.int64, copy=False)
    size = size.astype(np.int64 if integral else np.float64, copy=False)
    keys, ent, byt, fp, n, ok = kernels.side_sums(codes, h, size, spans, n_codes, size[:0])
    if not ok:
        raise AnalysisError(f"per-key sums: rows {spans.tolist()[:4]} or their key codes outside the {len(codes)} "
                            f"rows and 0..{n_codes - 1}")
    return keys[:n], ent[:n], _int64(byt[:n]), fp[:n]


def _spans_of(codes: np.ndarray, rows: np.ndarray | slice | list, h: np.ndarray,
              size: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(codes, h, size, spans)``: the rows as ``(lo, hi)`` spans of the arrays (positions are
    gathered into new arrays)."""
    if isinstance(rows, list):
        return codes, h, size, np.array(rows, dtype=np.int64).reshape(-1, 2)
    if isinstance(rows, slice):
        lo, hi, _ = rows.indices(len(codes))
        return codes, h, size, np.array([[lo, max(lo, hi)]], dtype=np.int64)
    return codes[rows], h[rows], size[rows], np.array([[0, len(rows)]], dtype=np.int64)


def _side_rows(codes: np.ndarray, rows: np.ndarray | slice | list, h: np.ndarray, size: np.ndarray,
               n_codes: int) -> tuple[np.ndarray, ...]:
    """One state of one side as :func:`._diff_kernels.merge_state` reads it, one key per row:
    ``(codes, entries, bytes, fingerprints, spans)``. A value state (one entry per key, codes
    rising, integer sizes) is its own rows, read in place (``entries`` empty: one each); any
    other is summed per key (:func:`_side_keys`)."""
    from . import _diff_kernels as kernels

    codes = codes.astype(np.int64, copy=False)
    c, hr, sz, spans = _spans_of(codes, rows, h, size)
    if sz.dtype == np.int64 and hr.dtype == np.uint64:
        one = kernels.rising(c, spans, n_codes)
        if one < 0:
            raise AnalysisError(f"per-key sums: rows {spans.tolist()[:4]} or their key codes outside the {len(c)} "
                                f"rows and 0..{n_codes - 1}")
        if one:
            return c, np.zeros(0, dtype=np.int64), sz, hr, spans
    keys, ent, byt, fp = _side_keys(c, [tuple(x) for x in spans.tolist()], hr, sz, n_codes)
    return keys, ent, byt, fp, np.array([[0, len(keys)]], dtype=np.int64)


def _int64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64, copy=False) if np.issubdtype(x.dtype, np.integer) else np.rint(x).astype(np.int64)


_INT_COLUMNS = ["entries_a", "entries_b", "entries_delta", "bytes_a", "bytes_b", "bytes_delta"]


def _diff_snapshots(a, b, operator, state, unchanged: bool) -> pd.DataFrame:
    """:func:`diff` of two Snapshots over their cached analysis columns and Arrow row hashes.

    The ``key`` column is the string dtype :data:`KEY_STRINGS` (Arrow-backed) when the keys of
    both snapshots are Arrow strings, built in one pass over their bytes without a Python
    object per key; Python objects otherwise, as in the diff of two DataFrames (the two paths
    give equal frames).
    """
    try:
        return _diff_snapshots_of(a, b, operator, state, unchanged)
    except AnalysisError as exc:
        raise AnalysisError(f"diff of {getattr(a, 'path', a)} and {getattr(b, 'path', b)}: {exc}") from exc


def _diff_snapshots_of(a, b, operator, state, unchanged: bool) -> pd.DataFrame:
    from . import _diff_kernels as kernels

    if a is not b and not a.analysis_cache.loaded and not b.analysis_cache.loaded:
        # both sides read and numbered at once (Arrow's reads and the key kernel release the GIL); each
        # thread's reads run under its reader's budget (:func:`explorer.readers.base._guard_iter`)
        fa, fb = _both(lambda: _gathered(cached_frame(a, operator, state)),
                       lambda: _gathered(cached_frame(b, operator, state)))
    else:
        fa, fb = cached_frame(a, operator, state), cached_frame(b, operator, state)
    kva, kvb = fa.attrs["key_values"], fb.attrs["key_values"]
    pa_, pb_ = positions(a, operator, state), positions(b, operator, state)
    ha, hb = row_hashes(a), row_hashes(b)
    ha = ha if pa_ is None else ha[pa_]
    hb = hb if pb_ is None else hb[pb_]
    tr, new_from_b = _joint_codes(kva, kvb, lambda: _key_group_per_code(a, b, kva, kvb))
    codes_a = fa["key"].to_numpy(dtype=np.int64)
    codes_b = fb["key"].to_numpy(dtype=np.int64)
    na = len(kva)
    k = na + len(new_from_b)
    rows_a, rows_b = _spans_by_state(fa), _spans_by_state(fb)
    size_a, size_b = fa["size_bytes"].to_numpy(), fb["size_bytes"].to_numpy()
    none = np.zeros(0, dtype=np.int64)
    empty = (none, none, none, np.zeros(0, dtype=np.uint64), np.zeros((0, 2), dtype=np.int64))
    names = sorted(set(rows_a) | set(rows_b))
    sides_a, sides_b = _both(  # each side's keys per state, the two sides side by side
        lambda: [_side_rows(codes_a, rows_a[n], ha, size_a, na) if n in rows_a else empty for n in names],
        lambda: [_side_rows(codes_b, rows_b[n], hb, size_b, len(kvb)) if n in rows_b else empty for n in names])
    if not names:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    row_kind = np.zeros(0, dtype=np.int32 if max(len(codes_b), len(kvb)) < 2**31 - 1 else np.int64)
    # b's keys of each state in joint order (a kernel without the GIL): two states side by side
    orders = _on_both(lambda sb: kernels.b_order(sb[0], sb[4], tr, k, row_kind), sides_b)
    parts = []  # per state: its halves (a's rows, b's order) merged side by side on two threads
    for (op, st), sa, sb, ob in zip(names, sides_a, sides_b, orders):
        if len(ob) != sum(int(hi - lo) for lo, hi in sb[4]):
            raise AnalysisError(f"state {op}/{st}: b's keys have joint codes repeated or outside 0..{k - 1}")
        parts.append(_halves(kernels, sa, sb, ob, tr))
    no_rows, no_block = np.empty((0, 6), dtype=np.int64), np.empty((6, 0), dtype=np.int64)
    no_status, no_joint = np.empty(0, dtype=np.int8), np.empty(0, dtype=np.int64)

    def count(half: tuple) -> tuple[int, int, int]:  # pass 1: rows kept, positive and negative deltas
        c = kernels.merge_state(*half, tr, unchanged, False, 0, 0, no_block, no_status, no_joint, no_rows)
        if c[0] < 0:
            raise AnalysisError("rows or key codes out of range")
        return c

    counts = [_on_both(count, halves) for halves in parts]
    totals = [tuple(sum(x) for x in zip(*c)) for c in counts]
    total = sum(t[0] for t in totals)
    block = np.empty((len(_INT_COLUMNS), total), dtype=np.int64)  # the six int columns, one pandas block
    status = np.empty(total, dtype=np.int8)
    joint = np.empty(total, dtype=np.int64)
    at = 0
    for (op, st), halves, cs, (kept, pos, neg) in zip(names, parts, counts, totals):  # pass 2: write
        starts = np.cumsum([0] + [c[0] - c[1] - c[2] for c in cs])  # zero-delta rows before each half

        def write(i: int) -> np.ndarray:
            nonzero = np.empty((cs[i][1] + cs[i][2], 6), dtype=np.int64)
            c = kernels.merge_state(*halves[i], tr, unchanged, True, at + int(starts[i]), pos, block, status,
                                    joint, nonzero)
            if tuple(c) != tuple(cs[i]):  # pragma: no cover - the same merge as pass 1
                raise AnalysisError(f"state {op}/{st}: rows or key codes out of range")
            return nonzero

        nonzero = np.concatenate(_on_both(write, list(range(len(halves)))))  # joint order: half 1, half 2
        if not kernels.place_nonzero(nonzero, at, kept, block, status, joint):  # pragma: no cover
            raise AnalysisError(f"state {op}/{st}: rows out of range")
        at += kept

    def frame() -> pd.DataFrame:
        ops = np.empty(total, dtype=object)
        sts = np.empty(total, dtype=object)
        at = 0
        for (op, st), (kept, _, _) in zip(names, totals):
            ops[at: at + kept] = op
            sts[at: at + kept] = st
            at += kept
        out = pd.DataFrame(block.T, columns=_INT_COLUMNS, copy=False)
        out.insert(0, "status", pd.Categorical.from_codes(status, categories=list(STATUSES)))
        out.insert(0, "state", sts)
        out.insert(0, "operator", ops)
        return out

    # the keys' bytes (a kernel without the GIL) on a second thread while this one builds the rest
    out, keys = _both(frame, lambda: _keys_of(joint, kva, kvb, new_from_b))
    out.insert(2, "key", keys)
    return out


def _gathered(f: pd.DataFrame) -> pd.DataFrame:
    """``f`` with its key dictionary gathered (a :class:`._keys.Deferred` one built), which the join reads:
    on the loading thread, side by side with the other side's load, rather than later on the main one."""
    kv = f.attrs.get("key_values")
    if isinstance(kv, KeyValues):
        kv.segments
    return f


_HALF_KEYS = 1 << 20


def _halves(kernels, sa: tuple, sb: tuple, ob: np.ndarray, tr: np.ndarray) -> list[tuple]:
    """One state's merge input (:func:`._diff_kernels.merge_state` arguments before ``tr``) cut
    at a joint code in two halves of about as many of a's keys, when it has ``_HALF_KEYS`` or
    more; else whole."""
    codes, spans = sa[0], sa[4]
    n_a = int(sum(int(hi - lo) for lo, hi in spans))
    if n_a < _HALF_KEYS or len(ob) < _HALF_KEYS:
        return [sa[:4] + (spans,) + sb[:4] + (ob,)]
    mid, left, right = n_a // 2, [], []
    for lo, hi in spans.tolist():  # the row of a's middle key; its code is the cut
        if 0 <= mid < hi - lo:
            cut = int(codes[lo + mid])
            left.append((lo, lo + mid))
            right.append((lo + mid, hi))
        elif mid >= hi - lo:
            left.append((lo, hi))
        else:
            right.append((lo, hi))
        mid -= hi - lo
    q = int(kernels.first_at_least(ob, sb[0], tr, cut))
    if q < 0:
        raise AnalysisError("b's rows or key codes out of range")
    as_spans = [np.array(x, dtype=np.int64).reshape(-1, 2) for x in (left, right)]
    return [sa[:4] + (as_spans[0],) + sb[:4] + (ob[:q],), sa[:4] + (as_spans[1],) + sb[:4] + (ob[q:],)]


def _on_both(fn, items: list) -> list:
    """``[fn(x) for x in items]``, the second of two items on a second thread."""
    if len(items) == 2:
        return list(_both(lambda: fn(items[0]), lambda: fn(items[1])))
    return [fn(x) for x in items]


def _spans_by_state(df: pd.DataFrame) -> dict[tuple[str, str], list[tuple[int, int]] | np.ndarray | slice]:
    """Rows of each ``(operator, state)`` of a cached frame: its pieces' ``(lo, hi)`` spans
    (:func:`._columns.state_rows` positions for any other frame)."""
    spans = df.attrs.get("spans")
    if spans is None or spans[0] != len(df):
        return {(op, st): rows for op, st, rows in state_rows(df)}
    out: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for op, st, lo, hi in spans[1]:
        out.setdefault((str(op), str(st)), []).append((lo, hi))
    return out


def _key_group_per_code(a, b, kva: KeyValues, kvb: KeyValues) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The key group of each key code's rows on each side (for :func:`_slices`; None without
    a key group column). A key whose rows disagree gets one of their groups: the join's answer
    does not depend on them."""
    out = []
    for snap, kv in ((a, kva), (b, kvb)):
        f = cached_frame(snap)
        if "key_group" not in f.columns or not len(kv) or not np.issubdtype(f["key_group"].dtype, np.integer):
            return None, None
        out.append((f["key"].to_numpy(dtype=np.int64), f["key_group"].to_numpy(), len(kv)))

    def per_code(codes: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
        g = np.zeros(n, dtype=np.int32)
        g[codes] = groups
        return g

    return _both(lambda: per_code(*out[0]), lambda: per_code(*out[1]))


#: the dtype of a diff's ``key`` column when every key is a string: pandas 3's default string
#: dtype (Arrow-backed, NaN for missing), also in pandas 2.3
KEY_STRINGS = pd.StringDtype("pyarrow", na_value=np.nan)


def _string_keys(keys: np.ndarray) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """``keys`` (an object array) as :data:`KEY_STRINGS` when every one is a str, else as it is."""
    if len(keys) and pd.api.types.infer_dtype(keys, skipna=False) == "string":
        return pd.array(keys, dtype=KEY_STRINGS)
    return keys


def _is_arrow_strings(seg: object) -> bool:
    return isinstance(seg, pa.Array) and (pa.types.is_string(seg.type) or pa.types.is_large_string(seg.type))


def _keys_of(joint: np.ndarray, kva: KeyValues, kvb: KeyValues,
             new_from_b: np.ndarray) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """The keys of joint codes ``joint``, in that order: :data:`KEY_STRINGS` when every key of
    both sides is an Arrow string, else Python objects (:func:`_string_keys` of them).

    When each side's keys are one Arrow array of strings, the listed keys' bytes are copied
    straight from both arrays' buffers into a new Arrow array (:func:`._diff_kernels.gather_strings`).
    """
    segs = kva.segments + kvb.segments
    if segs and all(_is_arrow_strings(s) for s in segs):
        if len(kva.segments) == 1 and len(kvb.segments) <= 1:
            from . import _diff_kernels as kernels

            off_a, data_a = string_buffers(kva.segments[0])
            off_b, data_b = string_buffers(kvb.segments[0]) if kvb.segments else (np.zeros(1, np.int64),
                                                                                   np.zeros(0, np.uint8))
            offsets, data, ok = kernels.gather_strings(joint, len(kva), off_a, data_a, off_b, data_b, new_from_b)
            if not ok:
                raise AnalysisError(f"keys of {len(joint)} diff rows: key codes or offsets out of range")
            arr = pa.LargeStringArray.from_buffers(len(joint), pa.py_buffer(offsets), pa.py_buffer(data))
            return KEY_STRINGS.construct_array_type()(pa.chunked_array([arr]))
        return pd.array(_key_objects(joint, kva, kvb, new_from_b), dtype=KEY_STRINGS)
    return _string_keys(_key_objects(joint, kva, kvb, new_from_b))


def _key_objects(joint: np.ndarray, kva: KeyValues, kvb: KeyValues, new_from_b: np.ndarray) -> np.ndarray:
    na = len(kva)
    out = np.empty(len(joint), dtype=object)
    from_a = joint < na
    ia = np.flatnonzero(from_a)
    out[ia] = kva.take(joint[ia])
    ib = np.flatnonzero(~from_a)
    out[ib] = kvb.take(new_from_b[joint[ib] - na])
    return out


def _group_sums(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Wrapping uint64 sums of ``values`` per group (0 for empty groups)."""
    out = np.zeros(n, dtype=np.uint64)
    if not len(group):
        return out
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    with np.errstate(over="ignore"):
        out[g[starts]] = np.add.reduceat(values[order], starts)
    return out


def diff_summary(d: pd.DataFrame) -> pd.DataFrame:
    """Per (operator, state) of a :func:`diff`: keys added/removed/changed/unchanged and growth.

    Columns: ``operator, state, keys_added, keys_removed, keys_changed, keys_unchanged,``
    ``entries_a, entries_b, entries_growth, bytes_a, bytes_b, bytes_growth, growth_pct``.
    """
    counts = pd.crosstab([d["operator"], d["state"]], d["status"]).reindex(columns=list(STATUSES), fill_value=0)
    counts.columns = [f"keys_{c}" for c in counts.columns]
    sums = d.groupby(["operator", "state"], observed=True)[["entries_a", "entries_b", "bytes_a", "bytes_b"]].sum()
    out = counts.join(sums).reset_index()
    out["entries_growth"] = out["entries_b"] - out["entries_a"]
    out["bytes_growth"] = out["bytes_b"] - out["bytes_a"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["growth_pct"] = np.where(out["bytes_a"] > 0, 100.0 * out["bytes_growth"] / out["bytes_a"], np.nan)
    return out[["operator", "state", "keys_added", "keys_removed", "keys_changed", "keys_unchanged", "entries_a",
                "entries_b", "entries_growth", "bytes_a", "bytes_b", "bytes_growth", "growth_pct"]]


def growth_by_key(d: pd.DataFrame, n: int | None = 10) -> pd.DataFrame:
    """Per (operator, key) of a :func:`diff`, summed over states: the keys that grew most, first.

    Columns: ``operator, key, entries_a, entries_b, entries_delta, bytes_a, bytes_b, bytes_delta``.
    """
    codes, keys = factorize_keys(d["key"])
    g = d.assign(_k=codes).groupby(["operator", "_k"], sort=False, observed=True)[
        ["entries_a", "entries_b", "entries_delta", "bytes_a", "bytes_b", "bytes_delta"]].sum().reset_index()
    g.insert(1, "key", keys[g.pop("_k").to_numpy()])
    g = g.sort_values(["bytes_delta", "entries_delta"], ascending=False, kind="stable").reset_index(drop=True)
    return g.head(n) if n is not None else g


def _same_key_groups(a: Any, b: Any) -> bool:
    """Whether every operator both snapshots hold has the same max parallelism in both (its keys then lie
    in the same key groups, so the two can be diffed range by range); else a warning, and the diff runs
    in memory."""
    ma = dict(zip(a.operators["operator"], a.operators["max_parallelism"]))
    mb = dict(zip(b.operators["operator"], b.operators["max_parallelism"]))
    differ = sorted(op for op in set(ma) & set(mb) if int(ma[op]) != int(mb[op]))
    if differ:
        warnings.warn(f"diff of {a.path} and {b.path}: the operators {differ} changed max parallelism, so their keys "
                      "lie in other key groups: the diff holds both snapshots in memory, over the memory budget",
                      stacklevel=3)
    return not differ


def _diff_streamed(a: Any, b: Any, operator, state, unchanged: bool) -> pd.DataFrame:
    """:func:`diff` of two Snapshots over their memory budget: the same key-group range of both at a time
    (a key lies in the same key group of both when the max parallelism is the same), the answers joined.
    Rows of equal ``bytes_delta`` come in key-group order."""
    parts, empty = [], None
    # each range reads what the diff uses (keys, key groups, sizes and the entries it hashes): no last-access
    # times, expiry or subtasks, which a diff does not look at
    for va, vb in _ranges.ranges("diff", a, b, operator=operator, state=state, entries=True,
                                 columns=KEY_PASS_COLUMNS):
        d = diff(va, vb, operator=operator, state=state, unchanged=unchanged)
        if len(d):
            parts.append(d)
        elif empty is None:
            empty = d  # an empty answer with the dtypes of the keys
    if not parts:
        return empty if empty is not None else pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    if out["key"].dtype != KEY_STRINGS and pd.api.types.infer_dtype(out["key"], skipna=False) == "string":
        out["key"] = pd.array(out["key"].to_numpy(dtype=object), dtype=KEY_STRINGS)  # as the in-memory diff
    out["status"] = pd.Categorical(out["status"], categories=list(STATUSES))
    out = out.sort_values(["operator", "state", "bytes_delta"], ascending=[True, True, False], kind="stable")
    return out.reset_index(drop=True)[DIFF_COLUMNS]
