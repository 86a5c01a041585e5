"""Reader pieces as one pandas DataFrame in the contract's column order (the last step of ``keyed_state()``).

Columns with one value a piece (operator, state, kind) are filled from that value, not converted row by
row; tuple keys become Python tuples; values of mixed types stay the Python values stored.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..readers.base import (
    CONTRACT_COLUMNS,
    FIXED_TYPES,
    TUPLE_COLUMNS,
    constant_values,
    has_union,
    python_values,
    struct_to_tuple,
)

__all__ = ["LeftOut", "PER_PIECE_COLUMNS", "combine"]

#: columns that hold one value per piece (an operator's, a state's, a kind's name)
PER_PIECE_COLUMNS = ("operator", "state", "kind")


def _constant(piece: pa.Table, name: str) -> tuple[bool, Any]:
    """Whether column ``name`` of ``piece`` holds one value, and that value; the piece may have been read
    without that column when its metadata gives the value."""
    given = constant_values(piece)
    if name in given:
        return True, given[name]
    if name not in piece.column_names:
        return piece.num_rows == 0, None  # an empty piece has no value to give
    column = piece.column(name)
    if len(column) == 0 or column.null_count:
        return False, None
    first = column[0]
    if not pc.all(pc.equal(column, first)).as_py():
        return False, None
    return True, first.as_py()


def _ints_with_nulls(column: pa.ChunkedArray) -> np.ndarray:
    """An integer column with nulls as an object array of Python ints and None (no Python list in between)."""
    out = np.empty(len(column), dtype=object)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(valid)
    out[idx] = column.filter(column.is_valid()).to_numpy(zero_copy_only=False).astype(np.int64).tolist() \
        if len(idx) else []
    return out


def _piece_to_pandas(piece: pa.Table) -> pd.DataFrame:
    mixed = [f.name for f in piece.schema if has_union(f.type)]  # values of mixed types: Python values as stored
    df = piece.drop_columns(mixed).to_pandas(maps_as_pydicts="strict", integer_object_nulls=True,
                                             deduplicate_objects=False)
    for c in mixed:
        df.insert(piece.column_names.index(c), c, pd.Series(python_values(piece.column(c)), dtype=object, index=df.index))
    meta = piece.schema.metadata or {}
    for c in meta.get(TUPLE_COLUMNS, b"").decode().split(","):
        if c and c in df.columns:
            df[c] = pd.Series([struct_to_tuple(v) for v in df[c]], index=df.index, dtype=object)
    return df


def combine(pieces: list[pa.Table], columns: Sequence[str] | None) -> pd.DataFrame:
    """One DataFrame from the pieces, in contract column order.

    Columns that are constant within each piece (operator, state, kind) are not converted
    row by row through Arrow: they are filled with ``np.repeat`` of one Python string per
    piece, which is what makes loading close to a raw ``read_table().to_pandas()``.
    """
    cols = [c for c in CONTRACT_COLUMNS if not columns or c in columns]
    if not pieces:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    filled: dict[str, np.ndarray] = {}
    for c in PER_PIECE_COLUMNS:
        if c not in cols:
            continue
        values = []
        for p in pieces:
            ok, v = _constant(p, c)
            if not ok:
                break
            values.append(v)
        else:
            filled[c] = np.repeat(np.array(values, dtype=object), [p.num_rows for p in pieces])
            continue
        # not one value a piece: converted row by row, each piece's column built where it was left out
        pieces = [_with_constant(p, c) for p in pieces]
    if filled:
        pieces = [p.drop_columns([c for c in filled if c in p.column_names]) for p in pieces]
    if any((p.schema.metadata and TUPLE_COLUMNS in p.schema.metadata) or any(has_union(f.type) for f in p.schema)
           for p in pieces):
        return _assemble(pd.concat([_piece_to_pandas(p) for p in pieces], ignore_index=True), filled, cols)
    try:
        table = pa.concat_tables(pieces, promote_options="permissive")
        gaps = [c for c in ("user_key", "value") if c in table.column_names
                and pa.types.is_integer(table.schema.field(c).type) and table.column(c).null_count]
        # deduplicate_objects=False: keys are mostly distinct, and looking each string up in a hash table
        # to share equal ones cost 7 of the 9 CPU seconds of converting 10 M keys
        df = table.drop_columns(gaps).to_pandas(maps_as_pydicts="strict", split_blocks=True,
                                                integer_object_nulls=True, deduplicate_objects=False)
        for c in gaps:  # integers with gaps (states mixed) stay exact Python ints: not float64
            filled[c] = _ints_with_nulls(table.column(c))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        df = pd.concat([p.to_pandas(maps_as_pydicts="strict", integer_object_nulls=True, deduplicate_objects=False)
                        for p in pieces], ignore_index=True)
    return _assemble(df, filled, cols)


class LeftOut(Exception):
    """A piece was read without a per-piece column it holds row by row: read again with that column."""


def _with_constant(piece: pa.Table, name: str) -> pa.Table:
    """``piece`` with its column ``name``, built from the metadata's value when the piece was read without it."""
    if name in piece.column_names:
        return piece
    given = constant_values(piece)
    if name not in given and piece.num_rows:
        raise LeftOut(name)
    at = sum(1 for c in CONTRACT_COLUMNS[: CONTRACT_COLUMNS.index(name)] if c in piece.column_names)
    return piece.add_column(at, name, pa.repeat(pa.scalar(given.get(name), type=FIXED_TYPES.get(name)), piece.num_rows))


def _assemble(df: pd.DataFrame, filled: dict[str, np.ndarray], cols: list[str]) -> pd.DataFrame:
    """``df``'s columns and the object arrays of ``filled`` as one frame in ``cols`` order, nothing copied.

    ``DataFrame.insert`` copies the column it is given and scans an object column for datetimes: for the
    three per-piece columns of 12 M rows that took 1.3 s of a 6 s load; a frame built from the columns
    as they are, without consolidating them, takes a millisecond.
    """
    index = df.index if len(df.columns) or not filled else pd.RangeIndex(len(next(iter(filled.values()))))
    parts = {c: pd.Series(filled[c], index=index, dtype=object, copy=False) if c in filled else df[c] for c in cols}
    return pd.DataFrame(parts, index=index, copy=False)
