"""Comparing decoded Flink state with the expected values real Flink jobs computed (EXPECTED.json).

Shared by ``tools/flink/check_fixtures.py`` (the survey) and
``tests/readers/test_flink_production.py``. The EXPECTED.json schema and the
self-describing value types (``{"type": "pojo", ...}``) are in
``tools/flink/README.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import traceback
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

ANY = object()


# --------------------------------------------------------------------------- value matching
def exc_text(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:220]}"


def is_raw(got: Any) -> bool:
    return isinstance(got, (bytes, bytearray, memoryview))


def as_timestamp(v: Any) -> pd.Timestamp | None:
    try:
        t = pd.Timestamp(v)
    except (ValueError, TypeError):
        return None
    if t.tzinfo is not None:
        t = t.tz_convert("UTC").tz_localize(None)
    return t


def as_list(got: Any) -> list | None:
    if isinstance(got, (list, tuple)):
        return list(got)
    if isinstance(got, np.ndarray):
        return got.tolist()
    return None


def match(exp: Any, got: Any) -> bool:
    """Does the decoded ``got`` equal the self-describing expected value ``exp``?"""
    if exp is None:
        return got is None or (isinstance(got, float) and math.isnan(got))
    if isinstance(exp, bool):
        return isinstance(got, (bool, np.bool_)) and bool(got) == exp
    if isinstance(exp, int):
        return isinstance(got, (int, np.integer)) and not isinstance(got, bool) and int(got) == exp
    if isinstance(exp, float):
        return isinstance(got, (float, int, np.floating, np.integer)) and abs(float(got) - exp) <= 1e-9 * max(1, abs(exp))
    if isinstance(exp, str):
        return isinstance(got, str) and got == exp
    if isinstance(exp, list):
        g = as_list(got)
        return g is not None and len(g) == len(exp) and all(match(e, x) for e, x in zip(exp, g))
    if not isinstance(exp, dict):
        return False
    t = exp.get("type")
    if t in ("pojo", "kryo"):
        if not isinstance(got, dict):
            return False
        f = exp["fields"]
        return set(got) == set(f) and all(match(f[k], got[k]) for k in f)
    if t == "tuple":
        fs = exp["fields"]
        if isinstance(got, dict):
            return len(got) == len(fs) and all(match(fs[i], got.get(f"f{i}", ANY)) for i in range(len(fs)))
        g = as_list(got)
        return g is not None and len(g) == len(fs) and all(match(e, x) for e, x in zip(fs, g))
    if t == "row":
        fs = exp["fields"]
        if isinstance(fs, dict):
            return isinstance(got, dict) and set(got) == set(fs) and all(match(fs[k], got[k]) for k in fs)
        if isinstance(got, dict):
            got = list(got.values())
        g = as_list(got)
        return g is not None and len(g) == len(fs) and all(match(e, x) for e, x in zip(fs, g))
    if t == "map":
        if not isinstance(got, dict):
            return False
        ents = exp["entries"]
        if len(got) != len(ents):
            return False
        for k, v in ents:
            hit = [gk for gk in got if match(k, gk)]
            if not hit or not match(v, got[hit[0]]):
                return False
        return True
    if t == "set":
        g = as_list(sorted(got, key=repr)) if isinstance(got, (set, frozenset)) else as_list(got)
        return g is not None and len(g) == len(exp["values"]) and all(any(match(e, x) for x in g) for e in exp["values"])
    if t == "enum":
        if isinstance(got, dict):
            got = got.get("name", got.get("value"))
        return getattr(got, "name", got) == exp["value"]
    if t in ("instant", "timestamp_ltz", "local_datetime", "date", "sql_timestamp"):
        if isinstance(got, (int, np.integer)) and "epoch_ms" in exp and t != "sql_timestamp":
            return int(got) == exp["epoch_ms"]
        a, b = as_timestamp(exp["value"]), as_timestamp(got) if not isinstance(got, (bytes, dict, list)) else None
        return a is not None and b is not None and a == b
    if t == "local_date":
        return isinstance(got, (dt.date, str, pd.Timestamp)) and str(got)[:10] == exp["value"]
    if t in ("decimal", "biginteger"):
        try:
            return not isinstance(got, (bytes, dict, list, float)) and Decimal(str(got)) == Decimal(exp["value"])
        except Exception:  # noqa: BLE001
            return False
    if t == "optional":
        if isinstance(got, dict) and "present" in got:
            return bool(got["present"]) == exp["present"] and match(exp["value"], got.get("value"))
        return match(exp["value"], got)
    if t == "either":
        side, v = exp["side"], exp["value"]
        if isinstance(got, dict):
            if side in got:
                return match(v, got[side])
            if "side" in got:
                return got["side"] == side and match(v, got.get("value"))
            if "isLeft" in got or "is_left" in got:
                return bool(got.get("isLeft", got.get("is_left"))) == (side == "left") and match(v, got.get("value"))
            return False
        g = as_list(got)
        return g is not None and len(g) == 2 and str(g[0]).lower() == side and match(v, g[1])
    if t == "array":
        g = as_list(got)
        return g is not None and len(g) == len(exp["values"]) and all(match(e, x) for e, x in zip(exp["values"], g))
    if t == "bytes":
        return isinstance(got, (bytes, bytearray)) and bytes(got).hex() == exp["hex"]
    if t == "char":
        return got == exp["value"]
    if t == "float":
        return isinstance(got, float) and str(got).lower().startswith(exp["value"].lower()[:3])
    if t == "time_window":
        return isinstance(got, dict) and got.get("start") == exp["start"] and got.get("end") == exp["end"]
    if t == "global_window":
        return got is not None and ("global" in str(got).lower())
    if t == "dataview":  # a SQL accumulator's MapView/ListView placeholder (its entries: a state of their own)
        return isinstance(got, dict) and got.get("data_view") == exp["view"]
    if t == "stream_record":  # an evicting window's element
        return isinstance(got, dict) and got.get("timestamp") == exp["timestamp"] and match(exp["value"], got.get("value"))
    if t in ("buffer_entry", "lockable"):
        if not isinstance(got, dict):
            return False
        el = got.get("element", got.get("value"))
        return match(exp["element"], el) and ("joined" not in exp or got.get("joined") == exp["joined"])
    return False


def key_canon(v: Any) -> str:
    """A hashable form of a key (expected or decoded): one-field rows/tuples stand for their field."""
    if isinstance(v, dict) and v.get("type") == "row":
        fs = v["fields"]
        fs = list(fs.values()) if isinstance(fs, dict) else fs
        return key_canon(fs[0]) if len(fs) == 1 else repr([key_canon(f) for f in fs])
    if isinstance(v, dict) and len(v) == 1:
        return key_canon(next(iter(v.values())))
    if isinstance(v, dict) and v and list(v) == [f"f{i}" for i in range(len(v))]:  # a Row as the reader gives it
        return repr([key_canon(f) for f in v.values()])
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return key_canon(v[0])
    if isinstance(v, (list, tuple)):
        return repr([key_canon(f) for f in v])
    if isinstance(v, np.integer):
        return str(int(v))
    return str(v)


_ROW_TYPE = re.compile(r"^Row\((.*)\)$")


def row_field_names(job_type: str) -> list[str] | None:
    """Field names of a job's declared ``Row(name TYPE, ...)`` type, in order; None for other types.

    Flink's ``RowSerializer`` snapshot holds the field serializers but not the
    names, so the reader returns a Row positionally (``f0``, ``f1``...); the
    comparison names the fields from the type the job declared.
    """
    m = _ROW_TYPE.match(job_type.strip())
    if not m or not m.group(1):
        return None
    return [part.strip().split(" ", 1)[0] for part in m.group(1).split(",")]


def name_row_fields(value: Any, names: list[str]) -> Any:
    """A positional row ``{"f0": .., "f1": ..}`` with the declared names; anything else unchanged."""
    if len(set(names)) < len(names):  # (a description like "Row(count distinct, count, ..)", not names)
        return value
    if isinstance(value, dict) and list(value) == [f"f{i}" for i in range(len(names))]:
        return {n: value[f"f{i}"] for i, n in enumerate(names)}
    return value


def one_field_row_equals(exp: Any, got: Any) -> bool:
    """A one-field row in EXPECTED.json stands for its field (SQL map-view keys, like SQL keys)."""
    if isinstance(exp, dict) and exp.get("type") == "row":
        fs = exp["fields"]
        fs = list(fs.values()) if isinstance(fs, dict) else fs
        return len(fs) == 1 and match(fs[0], got)
    return False


def short(v: Any, n: int = 110) -> str:
    s = repr(v) if not isinstance(v, (dict, list)) else json.dumps(v, default=repr, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


# --------------------------------------------------------------------------- one fixture
def resolve_operator(snap_ops: list[str], uid: str, mode: str) -> str | None:
    if uid in snap_ops:
        return uid
    if mode == "name-prefix":
        hits = [o for o in snap_ops if o.split("[")[0] == uid]
        return hits[0] if hits else None
    return None


def check_state(snap: Any, op: str, state: str, spec: dict, notes: list[str]) -> dict:
    ents = spec["entries"]
    res = {"state": state, "kind": spec["kind"], "type": spec["type"], "expected": len(ents), "ok": 0, "wrong": 0,
           "raw": 0, "missing": 0, "extra": 0, "example": "", "status": ""}
    try:
        df = snap.keyed_state(operator=op, state=state)
    except Exception as e:  # noqa: BLE001
        res["status"] = "EXC"
        res["example"] = exc_text(e)
        res["where"] = where(e)
        return res
    res["rows"] = len(df)
    if len(df) == 0 and ents:
        res["status"] = "MISSING"
        res["missing"] = len(ents)
        res["example"] = "no rows decoded"
        try:  # the reader says why (e.g. a heap checkpoint's key groups skipped after an undecodable value)
            why = [n for n in snap.notes if "skipped" in n or "cannot" in n and "key group" in n]
        except Exception:  # noqa: BLE001
            why = []
        if why:
            res["example"] += f"; {len(why)} notes like: {why[0].split('): ', 1)[-1][:220]}"
        return res
    by_key: dict[str, list[int]] = {}
    keys = df["key"].tolist()
    nss, uks, vals = df["namespace"].tolist(), df["user_key"].tolist(), df["value"].tolist()
    names = row_field_names(spec["type"])
    if names:
        vals = [name_row_fields(v, names) for v in vals]
    for i, k in enumerate(keys):
        by_key.setdefault(key_canon(k), []).append(i)
    wrong_ex = raw_ex = missing_ex = None
    for e in ents:
        cand = by_key.get(key_canon(e["key"]), [])
        if "namespace" in e:
            cand = [i for i in cand if match(e["namespace"], nss[i])]
        if "user_key" in e:
            cand = [i for i in cand if match(e["user_key"], uks[i]) or one_field_row_equals(e["user_key"], uks[i])]
        if not cand:
            near = by_key.get(key_canon(e["key"]), [])
            if near and all(is_raw(vals[i]) for i in near):  # e.g. a whole list left raw in one row
                res["raw"] += 1
                raw_ex = raw_ex or (e, vals[near[0]])
                continue
            res["missing"] += 1
            missing_ex = missing_ex or e
            continue
        if "value" not in e or any(match(e["value"], vals[i]) for i in cand):
            res["ok"] += 1
        elif all(is_raw(vals[i]) for i in cand):
            res["raw"] += 1
            raw_ex = raw_ex or (e, vals[cand[0]])
        else:
            res["wrong"] += 1
            wrong_ex = wrong_ex or (e, vals[cand[0]])
    fully_asserted = all("user_key" in e or spec["kind"] in ("value", "reducing", "aggregating") for e in ents)
    if fully_asserted and len(df) > len(ents):
        res["extra"] = len(df) - len(ents)
    state_notes = notes_for(notes, op, state)
    if res["wrong"]:
        e, g = wrong_ex
        res["example"] = f"key {short(e['key'], 40)}: expected {short(e['value'])}, got {short(g)}"
    elif res["raw"]:
        e, g = raw_ex
        res["example"] = f"left raw ({short(g, 40)}); note: {state_notes[0][:200] if state_notes else '(no note)'}"
    elif res["missing"]:
        e = missing_ex
        near = by_key.get(key_canon(e["key"]), [])
        got = f"; rows of that key: ns={short(nss[near[0]], 60)} uk={short(uks[near[0]], 40)}" if near else ""
        res["example"] = f"missing {short({k: v for k, v in e.items() if k != 'value'}, 140)}{got}"
    if res["ok"] == len(ents) and not res["extra"]:
        res["status"] = "OK"
    else:
        parts = [f"{n} {res[n]}" for n in ("ok", "wrong", "raw", "missing", "extra") if res[n]]
        res["status"] = ("WRONG" if res["wrong"] else "RAW" if res["raw"] else "MISSING" if res["missing"] else "EXTRA") \
            + " (" + ", ".join(parts) + ")"
    if state_notes and res["status"] != "OK" and "note" not in res["example"]:
        res["note"] = state_notes[0][:200]
    return res


def notes_for(notes: list[str], op: str, state: str) -> list[str]:
    """The reader's notes about this operator's state, without the snapshot path in front."""
    out = []
    for n in notes:
        if f"'{op}'" in n and f"'{state}'" in n:
            out.append(n.split("): ", 1)[-1] if "_metadata (" in n else n)
    return out


def where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    for fr in reversed(tb):
        if "/explorer/" in fr.filename:
            return f"{fr.filename.split('/explorer/')[-1]}:{fr.lineno} ({fr.name})"
    return ""
