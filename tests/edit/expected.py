"""What an edited savepoint must hold: the input's rows (or its job's EXPECTED.json entries) with the edits
applied, in a form that compares every value."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import pandas as pd

import explorer

ROW_COLUMNS = ("key", "namespace", "user_key", "value")


def _plain(v: Any) -> Any:
    """A value as comparable data (NaT/NaN as None, NumPy scalars as Python ones)."""
    if v is None or v is pd.NaT:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item") and not isinstance(v, (bytes, str)):
        try:
            return v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def rows(snap: explorer.Snapshot) -> dict[tuple[str, str], list[tuple]]:
    """Every keyed state's rows: (operator, state) -> sorted (key, namespace, user_key, value, last_access)."""
    out = {}
    for op, state in snap.states[["operator", "state"]].itertuples(index=False):
        df = snap.keyed_state(operator=op, state=state)
        recs = [tuple(repr(_plain(r[c])) for c in (*ROW_COLUMNS, "last_access")) for r in df.to_dict("records")]
        out[(op, state)] = sorted(recs)
    return out


def renumber_lists(snap_rows: dict, kinds: dict) -> dict:
    """List states' ``user_key`` (the index in the list) renumbered after elements were left out."""
    out = {}
    for k, recs in snap_rows.items():
        if kinds.get(k) != "list":
            out[k] = recs
            continue
        counters: dict = {}
        fixed = []
        for r in sorted(recs, key=lambda r: (r[0], r[1], int(r[2]))):
            i = counters.get((r[0], r[1]), 0)
            counters[(r[0], r[1])] = i + 1
            fixed.append((r[0], r[1], repr(i), *r[3:]))
        out[k] = sorted(fixed)
    return out


def expected_entries(path: Path, keep: Callable[[str, str, dict], bool] = lambda op, st, e: True,
                     rename: dict[str, str] | None = None, operators: set[str] | None = None,
                     change: Callable[[str, str, dict], dict] = lambda op, st, e: e) -> list[tuple]:
    """EXPECTED.json's entries (tools/flink/README.md) kept by ``keep``, changed by ``change``, operators renamed,
    as sorted JSON tuples."""
    exp = json.loads((path / "EXPECTED.json").read_text())
    out = []
    for op, o in exp["operators"].items():
        if operators is not None and op not in operators:
            continue
        for st, s in o["states"].items():
            for e in s["entries"]:
                if keep(op, st, e):
                    out.append(entry((rename or {}).get(op, op), st, change(op, st, dict(e))))
    return sorted(out)


def entry(op: str, state: str, e: dict) -> tuple:
    return (op, state, *(json.dumps(e.get(c), sort_keys=True) for c in ROW_COLUMNS))
