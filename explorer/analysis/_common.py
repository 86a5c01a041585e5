"""What every analysis shares: taking a Snapshot or a DataFrame, operator layouts, fast key groups.

Every analysis accepts either a snapshot (a :class:`~explorer.stored.StoredSnapshot`, such
as the :class:`~explorer.snapshot.Snapshot` ``explorer.open`` returns: it then
works on the analysis columns cached on the snapshot, see :mod:`._columns`, and
takes parallelism and max parallelism from the snapshot's metadata) or a
DataFrame with the contract columns (then ``max_parallelism=`` must be given
where key groups are recomputed, and the parallelism defaults to
``subtask.max() + 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence, Union

import numpy as np
import pandas as pd

from ..errors import AnalysisError
from ..keygroups import check_parallelism
from ..stored import StoredSnapshot
from ._columns import CACHED_COLUMNS, cached_frame
from ._keys import key_codes

Source = Union[StoredSnapshot, pd.DataFrame]

#: the columns most analyses need (never ``value``: it is the costly one to load)
LOAD_COLUMNS = ("operator", "state", "kind", "key", "key_group", "subtask", "size_bytes")

#: what a streamed per-key pass (key groups, hot keys) loads of each range: no subtask (it follows from the key
#: group at whichever parallelism is asked)
KEY_PASS_COLUMNS = ("operator", "state", "kind", "key", "key_group", "size_bytes")

TIMER_KINDS = ("event_timer", "processing_timer")


def is_snapshot(source: Any) -> bool:
    return hasattr(source, "keyed_state") and hasattr(source, "operators")


def frame(source: Source, columns: Sequence[str] = LOAD_COLUMNS, operator: str | Iterable[str] | None = None,
          state: str | Iterable[str] | None = None) -> pd.DataFrame:
    """The keyed-state rows of ``source`` with at least ``columns``, filtered by operator and state.

    For a Snapshot and columns among :data:`._columns.CACHED_COLUMNS` this is the cached
    analysis frame (keys as integer codes: use :func:`._columns.key_codes`).
    """
    if is_snapshot(source):
        if set(columns) <= CACHED_COLUMNS and hasattr(source, "reader"):
            return cached_frame(source, operator, state)
        return source.keyed_state(operator=operator, state=state, columns=list(columns))
    if not isinstance(source, pd.DataFrame):
        raise AnalysisError(f"expected a Snapshot or a keyed-state DataFrame, found {type(source).__name__}")
    missing = [c for c in columns if c not in source.columns]
    if missing:
        raise AnalysisError(
            f"the DataFrame lacks the columns {missing}; expected the keyed-state contract columns "
            f"(explorer.CONTRACT_COLUMNS), found {list(source.columns)}"
        )
    df = source
    if operator is not None:
        df = df[df["operator"].isin(_as_list(operator))]
    if state is not None:
        df = df[df["state"].isin(_as_list(state))]
    return df


def _as_list(x: str | Iterable[str]) -> list[str]:
    return [x] if isinstance(x, str) else list(x)


def keyed_operators(source: Any) -> pd.DataFrame:
    """The rows of ``source.operators`` that hold keyed state: flagged ``keyed`` (engine) or
    ``has_keyed_state`` (Flink); for a format without either flag, the operators with states."""
    ops = source.operators
    for flag in ("keyed", "has_keyed_state"):
        if flag in ops:
            return ops[ops[flag].fillna(False).astype(bool)]
    try:
        with_states = set(source.states["operator"])
    except Exception:  # noqa: BLE001 - a format without a states table: keep every operator
        return ops
    return ops[ops["operator"].isin(with_states)]


@dataclass(frozen=True)
class Layout:
    """How one keyed operator is laid out: its parallelism and max parallelism."""

    operator: str
    parallelism: int
    max_parallelism: int


def layouts(source: Source, df: pd.DataFrame, operator: str | Iterable[str] | None = None,
            parallelism: int | None = None, max_parallelism: int | None = None) -> dict[str, Layout]:
    """Layouts of the keyed operators in ``df`` (from the snapshot's metadata when there is one)."""
    names = operator_names(df)
    out: dict[str, Layout] = {}
    if is_snapshot(source):
        ops = keyed_operators(source)
        if operator is not None:
            ops = ops[ops["operator"].isin(_as_list(operator))]
        for row in ops.itertuples(index=False):
            out[row.operator] = Layout(row.operator, int(row.parallelism), int(row.max_parallelism))
        if operator is not None:
            unknown = set(_as_list(operator)) - set(out)
            if unknown:
                raise AnalysisError(f"{source.path}: no keyed operator named {sorted(unknown)}; "
                                    f"the keyed operators are {sorted(out)}")
    else:
        for name in names:
            sub = df.loc[df["operator"] == name, ["key_group", "subtask"]]
            if max_parallelism is None:
                raise AnalysisError(
                    "max_parallelism= is needed for a DataFrame (a Snapshot knows its own); "
                    f"the largest key group of operator {name!r} is {int(sub['key_group'].max())}"
                )
            out[name] = Layout(name, int(sub["subtask"].max()) + 1, int(max_parallelism))
    if parallelism is not None or max_parallelism is not None:
        out = {k: Layout(k, int(parallelism or v.parallelism), int(max_parallelism or v.max_parallelism))
               for k, v in out.items()}
    for lay in out.values():
        check_parallelism(lay.parallelism, lay.max_parallelism)
    return out


def partitioner(source: Any) -> str:
    """How keys map to key groups in ``source``: ``"spark"`` (Spark's shuffle partitions: Murmur3
    over Spark's encoding of the grouping columns) for Spark checkpoints, else ``"flink"``."""
    fmt = getattr(source, "format", None) if is_snapshot(source) else None
    return "spark" if isinstance(fmt, str) and fmt.startswith("spark") else "flink"


def non_timer(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without timer rows (the same frame, uncopied, when it has none)."""
    if "kind" not in df or not len(df):
        return df
    kind = df["kind"]
    if isinstance(kind.dtype, pd.CategoricalDtype):  # the cached frame: look at the categories, not the rows
        timer_codes = [i for i, c in enumerate(kind.cat.categories) if c in TIMER_KINDS]
        if not timer_codes:
            return df
        mask = np.isin(kind.cat.codes.to_numpy(), timer_codes)
    else:
        mask = kind.isin(TIMER_KINDS).to_numpy()
    return df[~mask] if mask.any() else df


def operator_names(df: pd.DataFrame) -> list[str]:
    """The operators with rows in ``df``, sorted (from the piece spans or the category codes of a
    cached frame: no hashing of 10 M names)."""
    if not len(df):
        return []
    spans = df.attrs.get("spans")
    if spans is not None and spans[0] == len(df):
        return sorted({str(op) for op, _, lo, hi in spans[1] if hi > lo})
    ops = df["operator"]
    if isinstance(ops.dtype, pd.CategoricalDtype):
        used = np.flatnonzero(np.bincount(ops.cat.codes.to_numpy(), minlength=len(ops.cat.categories)))
        return sorted(str(ops.cat.categories[i]) for i in used)
    return sorted(str(x) for x in pd.unique(ops))


def only_operator(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of operator ``name`` (the same frame, uncopied, when it holds nothing else)."""
    if operator_names(df) == [name]:
        return df
    return df[(df["operator"] == name).to_numpy()]


@dataclass
class KeyTable:
    """One row per (operator, key), as NumPy arrays (a DataFrame of 10 M rows costs copies).

    ``key`` holds codes into ``values`` (:class:`._columns.KeyValues`); rows are sorted by
    ``slot = op * len(values) + key``.
    """

    op: np.ndarray
    op_names: list
    key: np.ndarray
    key_group: np.ndarray
    subtask: np.ndarray
    entries: np.ndarray
    bytes: np.ndarray
    values: Any
    records: np.ndarray | None = None
    records_error: np.ndarray | None = None
    #: whether the traffic sketch counted the key (``records`` of other keys is unknown, stored as 0)
    records_known: np.ndarray | None = None
    #: per-subtask loads and top rows already computed on this table (it is not changed after)
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.key)

    def subtask_loads(self, metric: str, parallelism: int) -> np.ndarray:
        """``metric`` (or ``"keys"``) summed per subtask ``0..parallelism-1`` (float64; kept on the table)."""
        k = ("loads", metric, parallelism)
        if k not in self.memo:
            w = None if metric == "keys" else self.column(metric).astype(np.float64)
            self.memo[k] = np.bincount(self.subtask, weights=w, minlength=parallelism).astype(np.float64)
        return self.memo[k]

    @property
    def slot(self) -> np.ndarray:
        return self.op.astype(np.int64) * max(len(self.values), 1) + self.key

    def column(self, name: str) -> np.ndarray:
        return getattr(self, name)

    def take(self, idx: np.ndarray | slice) -> "KeyTable":
        if isinstance(idx, np.ndarray) and idx.dtype == bool:
            idx = np.flatnonzero(idx)  # one pass over the mask, not one per column
        pick = (lambda a: None if a is None else a[idx])
        return KeyTable(self.op[idx], self.op_names, self.key[idx], self.key_group[idx], self.subtask[idx],
                        self.entries[idx], self.bytes[idx], self.values, pick(self.records),
                        pick(self.records_error), pick(self.records_known))

    def of_operator(self, name: str) -> "KeyTable":
        if name not in self.op_names:
            return self.take(np.zeros(0, dtype=np.int64))
        if self.op_names == [name]:
            return self
        return self.take(self.op == self.op_names.index(name))

    def to_frame(self, idx: np.ndarray | slice | None = None) -> pd.DataFrame:
        """A DataFrame of these rows (all, or ``idx``) with keys turned back into values."""
        t = self if idx is None else self.take(idx)
        out = pd.DataFrame({
            "operator": np.asarray(t.op_names, dtype=object)[t.op] if len(t.op_names) else np.zeros(0, dtype=object),
            "key": t.values.take(t.key), "key_group": t.key_group, "subtask": t.subtask,
            "entries": t.entries, "bytes": t.bytes,
        })
        if t.records is not None:
            known = t.records_known if t.records_known is not None else np.ones(len(t), dtype=bool)
            out["records"] = pd.arrays.IntegerArray(t.records.astype(np.int64), ~known)
            out["records_error"] = pd.arrays.IntegerArray(t.records_error.astype(np.int64), ~known)
        return out


def per_key_codes(df: pd.DataFrame, subtasks: bool = True) -> KeyTable:
    """One row per (operator, key) of ``df`` (timers excluded), keys as codes.

    Sums are ``np.bincount`` over the code space: no Python loop and no hashing per key.
    ``subtasks=False`` leaves ``subtask`` zero (for callers that derive it from the key group).
    """
    rows = non_timer(df)
    codes, kv = key_codes(rows)
    k = max(len(kv), 1)
    ops = rows["operator"]
    if isinstance(ops.dtype, pd.CategoricalDtype) and ops.cat.categories.is_monotonic_increasing:
        op_names = [str(x) for x in ops.cat.categories]
        used = np.flatnonzero(np.bincount(ops.cat.codes.to_numpy(), minlength=len(op_names))) if len(op_names) > 1 \
            else np.arange(len(op_names))
        if len(used) == 1:  # one operator (the usual case): no combined code
            op_codes, op_names = None, [op_names[int(used[0])]]
        else:  # only the operators with rows (a filtered frame keeps every category)
            remap = np.full(len(op_names), -1, dtype=np.int64)
            remap[used] = np.arange(len(used))
            op_codes, op_names = remap[ops.cat.codes.to_numpy()], [op_names[int(i)] for i in used]
    else:
        op_codes, op_names = pd.factorize(ops, sort=True)
        op_names = [str(x) for x in op_names]
        if len(op_names) == 1:
            op_codes = None
    combined = codes if op_codes is None else op_codes.astype(np.int64) * k + codes
    size = len(op_names) * k
    kg = rows["key_group"].to_numpy()
    sums = _summed(combined, kg, rows["size_bytes"].to_numpy(), size)
    if sums is not None:  # millions of integer rows: one pass of a kernel
        entries, nbytes, kg_of = sums
    else:
        entries = np.bincount(combined, minlength=size)
        nbytes = np.bincount(combined, weights=rows["size_bytes"].to_numpy(dtype=np.float64), minlength=size)
        kg_of = np.zeros(size, dtype=kg.dtype if kg.dtype.kind == "i" else np.int64)
        kg_of[combined] = kg
    present = np.flatnonzero(entries)
    # every code has rows (a range's own keys, one operator): the per-code arrays are the per-key ones
    every = slice(None) if len(present) == size else present
    if subtasks:
        sub = rows["subtask"].to_numpy()
        sub_of = np.zeros(size, dtype=sub.dtype if sub.dtype.kind == "i" else np.int64)
        sub_of[combined] = sub
        sub_present = sub_of[every].astype(np.int64)
    else:
        sub_present = np.zeros(len(present), dtype=np.int64)
    if op_codes is None:
        op, key = np.zeros(len(present), dtype=np.int32), present
    else:
        op, key = (present // k).astype(np.int32), present % k
    byt = nbytes[every] if nbytes.dtype == np.int64 else np.rint(nbytes[every])
    return KeyTable(op=op, op_names=op_names, key=key, key_group=kg_of[every].astype(np.int64, copy=False),
                    subtask=sub_present, entries=entries[every].astype(np.int64, copy=False),
                    bytes=byt.astype(np.int64, copy=False), values=kv)


#: rows from which :func:`per_key_codes` sums with the kernel :func:`._key_kernels.per_key_sums`
KERNEL_ROWS = 1 << 18


def _summed(codes: np.ndarray, kg: np.ndarray, size: np.ndarray, n_codes: int) -> tuple | None:
    """Rows, summed sizes (int64) and key group per code from the kernel, for integer columns of
    :data:`KERNEL_ROWS` rows or more; None otherwise (the NumPy form)."""
    if len(codes) < KERNEL_ROWS or kg.dtype.kind != "i" or size.dtype.kind != "i" or codes.dtype != np.int64:
        return None
    from . import _key_kernels  # numba: loaded by the first large range, not by import explorer

    entries, nbytes = np.empty(n_codes, np.int64), np.empty(n_codes, np.int64)
    kg_of = np.empty(n_codes, dtype=kg.dtype)
    if not _key_kernels.per_key_sums(codes, kg, size.astype(np.int64, copy=False), n_codes, entries, nbytes, kg_of):
        return None
    return entries, nbytes, kg_of


def per_key(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (operator, key): key_group, subtask, entries, bytes (timers excluded), keys as values."""
    return per_key_codes(df).to_frame()


def now_of(source: Source, df: pd.DataFrame | None, now: Any) -> pd.Timestamp:
    """``now`` as a UTC timestamp: given, else the snapshot's creation time, else the latest last access."""
    if now is not None:
        if isinstance(now, (int, np.integer)):
            return pd.Timestamp(int(now), unit="ms", tz="UTC")
        ts = pd.Timestamp(now)
        return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    if is_snapshot(source) and source.created_at is not None:
        return pd.Timestamp(source.created_at).tz_convert("UTC")
    if df is not None and "last_access" in df and df["last_access"].notna().any():
        return pd.Timestamp(df["last_access"].max()).tz_convert("UTC")
    raise AnalysisError("now= is needed: the data has no snapshot time and no last-access times")
