"""Columns of decoded values as a small tree mirroring the decoder (:mod:`.valuecolumns`, :mod:`.kryocolumns`):
scalars as an Arrow array (:class:`Leaf`), values read one by one (:class:`Py`), dicts with fixed keys
(:class:`Struct`), lists (:class:`Seq`) and maps (:class:`Pairs`), with the operations the decoders need:
rows taken in any order with ``-1`` for an absent row (:func:`take`), columns joined (:func:`concat`), a
column decoded at some rows spread over all of them (:func:`spread`); and dates as days since the epoch
checked as ``datetime.date`` checks them (:func:`epoch_days`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .buffers import Fallback

#: elements per list beyond which waves are not worth it (the row path takes the state)
MAX_WAVES = 1024
#: Instant / LocalDateTime seconds kept column-wise: well inside pandas' nanosecond range (years 1677-2262)
MAX_SECONDS = 9_000_000_000


# --- decoded columns: a small tree mirroring the decoder ---------------------------------------------

@dataclass
class Leaf:
    """Scalar values: an Arrow array (nulls where absent)."""

    arr: pa.Array


@dataclass
class Py:
    """Values decoded one by one by their own decoder (None where absent)."""

    values: list


@dataclass
class Struct:
    """Dict values with fixed keys (POJO, Row, tuple, Either, TimeWindow); children null where absent."""

    names: list[str]
    children: list[Any]
    decs: list[Decoder]
    valid: np.ndarray


@dataclass
class Seq:
    """List values (``offsets``: n + 1, zero length where absent) of ``items``."""

    offsets: np.ndarray
    items: Any
    valid: np.ndarray


@dataclass
class Pairs:
    """Map values: ``keys`` and ``vals`` per entry between ``offsets``."""

    offsets: np.ndarray
    keys: Any
    vals: Any
    valid: np.ndarray


def length(node) -> int:
    if isinstance(node, Leaf):
        return len(node.arr)
    if isinstance(node, Py):
        return len(node.values)
    return len(node.valid)


def take(node, idx: np.ndarray):
    """Rows ``idx`` of ``node``; ``-1``: an absent (null) row."""
    absent = idx < 0
    if isinstance(node, Leaf):
        return Leaf(node.arr.take(pa.array(idx, type=pa.int64(), mask=absent if absent.any() else None)))
    if isinstance(node, Py):
        vals = node.values
        return Py([None if i < 0 else vals[i] for i in idx.tolist()])
    safe = np.where(absent, 0, idx)
    valid = node.valid[safe] & ~absent if len(node.valid) else np.zeros(len(idx), dtype=bool)
    if isinstance(node, Struct):
        return Struct(node.names, [take(c, idx) for c in node.children], node.decs, valid)
    off = node.offsets
    if len(off) > 1:
        starts = off[:-1][safe]
        lengths = np.where(absent, 0, (off[1:] - off[:-1])[safe])
    else:  # (no rows to take from: every row taken is absent)
        starts = lengths = np.zeros(len(idx), dtype=np.int64)
    new = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    item_idx = np.repeat(starts - new[:-1], lengths) + np.arange(new[-1], dtype=np.int64)
    if isinstance(node, Seq):
        return Seq(new, take(node.items, item_idx), valid)
    return Pairs(new, take(node.keys, item_idx), take(node.vals, item_idx), valid)


def concat(nodes: list):
    first = nodes[0]
    if len(nodes) == 1:
        return first
    if isinstance(first, Leaf):
        return Leaf(pa.concat_arrays([n.arr for n in nodes]))
    if isinstance(first, Py):
        return Py([v for n in nodes for v in n.values])
    valid = np.concatenate([n.valid for n in nodes])
    if isinstance(first, Struct):
        return Struct(first.names, [concat([n.children[i] for n in nodes]) for i in range(len(first.children))],
                      first.decs, valid)
    offs, base = [np.zeros(1, dtype=np.int64)], 0
    for n in nodes:
        offs.append(n.offsets[1:] + base)
        base += int(n.offsets[-1])
    off = np.concatenate(offs)
    if isinstance(first, Seq):
        return Seq(off, concat([n.items for n in nodes]), valid)
    return Pairs(off, concat([n.keys for n in nodes]), concat([n.vals for n in nodes]), valid)


def spread(node, present: np.ndarray):
    """``node`` decoded at the present rows only, as a column of all rows (nulls elsewhere)."""
    if present.all():
        return node
    idx = np.full(len(present), -1, dtype=np.int64)
    idx[present] = np.arange(int(present.sum()), dtype=np.int64)
    return take(node, idx)


def epoch_days(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of valid dates (``datetime.date`` would raise for others: the row path's error)."""
    if len(year) and ((year < 1) | (year > 9999) | (month < 1) | (month > 12) | (day < 1)).any():
        raise Fallback("an invalid date")
    months = (year - 1970) * 12 + (month - 1)
    first = months.astype("datetime64[M]").astype("datetime64[D]")
    nxt = (months + 1).astype("datetime64[M]").astype("datetime64[D]")
    if len(day) and (day > (nxt - first).astype(np.int64)).any():
        raise Fallback("an invalid date")
    return first.astype(np.int64) + day - 1
