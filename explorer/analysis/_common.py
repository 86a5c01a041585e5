"""What every analysis shares: taking a Snapshot or a DataFrame, operator layouts, fast key groups.

Every analysis accepts either a :class:`~explorer.snapshot.Snapshot` (it then
works on the analysis columns cached on the snapshot, see :mod:`._columns`, and
takes parallelism and max parallelism from the snapshot's metadata) or a
DataFrame with the contract columns (then ``max_parallelism=`` must be given
where key groups are recomputed, and the parallelism defaults to
``subtask.max() + 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence, Union

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import AnalysisError
from ..keygroups import assign_key_groups, check_parallelism, key_groups_for_hash_codes
from ._hashing import java_string_hashes

if TYPE_CHECKING:  # pragma: no cover
    from ..snapshot import Snapshot

Source = Union["Snapshot", pd.DataFrame]

#: the columns most analyses need (never ``value``: it is the costly one to load)
LOAD_COLUMNS = ("operator", "state", "kind", "key", "key_group", "subtask", "size_bytes")

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
        from ._columns import CACHED_COLUMNS, cached_frame

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


@dataclass(frozen=True)
class Layout:
    """How one keyed operator is laid out: its parallelism and max parallelism."""

    operator: str
    parallelism: int
    max_parallelism: int


def layouts(source: Source, df: pd.DataFrame, operator: str | Iterable[str] | None = None,
            parallelism: int | None = None, max_parallelism: int | None = None) -> dict[str, Layout]:
    """Layouts of the keyed operators in ``df`` (from the snapshot's metadata when there is one)."""
    names = sorted(str(x) for x in pd.unique(df["operator"])) if len(df) else []
    out: dict[str, Layout] = {}
    if is_snapshot(source):
        ops = source.operators
        if "keyed" in ops:
            ops = ops[ops["keyed"].astype(bool)]
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


def key_groups_of(keys: pd.Series | np.ndarray | pa.Array, max_parallelism: int) -> np.ndarray:
    """Flink key groups of many keys, equal to :func:`explorer.keygroups.assign_key_groups`.

    ASCII string keys (the common case) get Java's ``String.hashCode`` computed
    from the Arrow buffers in NumPy (:func:`._hashing.java_string_hashes`); everything
    else goes to :func:`~explorer.keygroups.assign_key_groups`.
    """
    arr = keys
    if isinstance(arr, pd.Series):
        arr = arr.to_numpy()
    if isinstance(arr, np.ndarray) and arr.dtype == object and len(arr) and all(
        type(x) is str for x in arr[: min(len(arr), 64)]
    ):
        try:
            arr = pa.array(arr, type=pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = keys
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr, pa.Array) and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) \
            and arr.null_count == 0:
        codes = java_string_hashes(arr)
        if codes is not None:
            return key_groups_for_hash_codes(codes, max_parallelism).astype(np.int64)
    return np.asarray(assign_key_groups(keys, max_parallelism), dtype=np.int64)


def non_timer(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without timer rows (the same frame, uncopied, when it has none)."""
    if "kind" not in df or not len(df):
        return df
    mask = df["kind"].isin(TIMER_KINDS).to_numpy()
    return df[~mask] if mask.any() else df


def only_operator(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of operator ``name`` (the same frame, uncopied, when it holds nothing else)."""
    ops = pd.unique(df["operator"])
    if len(ops) == 1 and ops[0] == name:
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

    def __len__(self) -> int:
        return len(self.key)

    @property
    def slot(self) -> np.ndarray:
        return self.op.astype(np.int64) * max(len(self.values), 1) + self.key

    def column(self, name: str) -> np.ndarray:
        return getattr(self, name)

    def take(self, idx: np.ndarray | slice) -> "KeyTable":
        pick = (lambda a: None if a is None else a[idx])
        return KeyTable(self.op[idx], self.op_names, self.key[idx], self.key_group[idx], self.subtask[idx],
                        self.entries[idx], self.bytes[idx], self.values, pick(self.records),
                        pick(self.records_error))

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
            out["records"] = t.records
            out["records_error"] = t.records_error
        return out


def per_key_codes(df: pd.DataFrame) -> KeyTable:
    """One row per (operator, key) of ``df`` (timers excluded), keys as codes.

    Sums are ``np.bincount`` over the code space: no Python loop and no hashing per key.
    """
    from ._columns import key_codes

    rows = non_timer(df)
    codes, kv = key_codes(rows)
    k = max(len(kv), 1)
    ops = rows["operator"]
    if isinstance(ops.dtype, pd.CategoricalDtype) and ops.cat.categories.is_monotonic_increasing:
        op_codes, op_names = ops.cat.codes.to_numpy(), list(ops.cat.categories)  # no pass over the rows
    else:
        op_codes, op_names = pd.factorize(ops, sort=True)
    op_names = [str(x) for x in op_names]
    combined = op_codes.astype(np.int64) * k + codes if len(op_names) > 1 else codes
    size = len(op_names) * k
    entries = np.bincount(combined, minlength=size)
    present = np.flatnonzero(entries)
    nbytes = np.bincount(combined, weights=rows["size_bytes"].to_numpy(dtype=np.float64), minlength=size)
    kg_of = np.zeros(size, dtype=np.int64)
    kg_of[combined] = rows["key_group"].to_numpy()
    sub_of = np.zeros(size, dtype=np.int64)
    sub_of[combined] = rows["subtask"].to_numpy()
    return KeyTable(op=(present // k).astype(np.int32), op_names=op_names, key=present % k,
                    key_group=kg_of[present], subtask=sub_of[present], entries=entries[present].astype(np.int64),
                    bytes=np.rint(nbytes[present]).astype(np.int64), values=kv)


def per_key(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (operator, key): key_group, subtask, entries, bytes (timers excluded), keys as values."""
    return per_key_codes(df).to_frame()


def first_occurrences(codes: np.ndarray) -> np.ndarray:
    """Row of the first occurrence of each code, for codes numbered in order of first appearance
    (as :func:`pandas.factorize` numbers them)."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    prev_max = np.maximum.accumulate(np.concatenate([[-1], codes[:-1]]))
    return np.flatnonzero(codes > prev_max)


def factorize_keys(keys: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for keys (tuples and other unhashable-by-pandas keys go through ``repr``)."""
    try:
        codes, uniques = pd.factorize(keys, sort=False)
        return codes.astype(np.int64), np.asarray(uniques, dtype=object)
    except TypeError:  # e.g. lists / dicts as keys: group by their repr, keep the first of each
        codes, _ = pd.factorize(keys.map(repr), sort=False)
        return codes.astype(np.int64), keys.to_numpy()[first_occurrences(codes)]


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
