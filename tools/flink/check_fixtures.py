"""Survey: read every production-style Flink fixture with the current reader and compare with its EXPECTED.json.

    python tools/flink/check_fixtures.py [sample_data/flink/production] [--out tools/flink/SURVEY.md] [--only NAME...]

For each fixture folder whose EXPECTED.json has an ``operators`` section (written by ProductionFixtures.java,
VersionFixtures runs or pyflink_job.py; schema in tools/flink/README.md) it opens the snapshot with
``explorer.open(path, uids=EXPECTED["uids"])``, runs ``snap.states``, ``snap.notes``, ``hot_keys()``,
``key_group_distribution()``, ``explorer.diff(snap, snap)`` and, for checkpoint folders,
``explorer.history(path)``, then reads every expected state with ``keyed_state(operator=, state=)`` and
compares every expected entry (key, namespace, user key, value) with the decoded rows.

Per state the result is one of: OK, WRONG (decoded, but a different value; an example is shown), RAW (left
as bytes; the reader's note is shown), MISSING (state or rows absent), EXC (exception type and first line).
Nothing here is a test: it only reports, so the decoder work can start from a precise list.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
import traceback
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import explorer  # noqa: E402

ANY = object()


# --------------------------------------------------------------------------- value matching
def _exc(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:220]}"


def _is_raw(got: Any) -> bool:
    return isinstance(got, (bytes, bytearray, memoryview))


def _ts(v: Any) -> pd.Timestamp | None:
    try:
        t = pd.Timestamp(v)
    except (ValueError, TypeError):
        return None
    if t.tzinfo is not None:
        t = t.tz_convert("UTC").tz_localize(None)
    return t


def _as_list(got: Any) -> list | None:
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
        g = _as_list(got)
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
        g = _as_list(got)
        return g is not None and len(g) == len(fs) and all(match(e, x) for e, x in zip(fs, g))
    if t == "row":
        fs = exp["fields"]
        if isinstance(fs, dict):
            return isinstance(got, dict) and set(got) == set(fs) and all(match(fs[k], got[k]) for k in fs)
        if isinstance(got, dict):
            got = list(got.values())
        g = _as_list(got)
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
        g = _as_list(sorted(got, key=repr)) if isinstance(got, (set, frozenset)) else _as_list(got)
        return g is not None and len(g) == len(exp["values"]) and all(any(match(e, x) for x in g) for e in exp["values"])
    if t == "enum":
        if isinstance(got, dict):
            got = got.get("name", got.get("value"))
        return getattr(got, "name", got) == exp["value"]
    if t in ("instant", "timestamp_ltz", "local_datetime", "date", "sql_timestamp"):
        if isinstance(got, (int, np.integer)) and "epoch_ms" in exp and t != "sql_timestamp":
            return int(got) == exp["epoch_ms"]
        a, b = _ts(exp["value"]), _ts(got) if not isinstance(got, (bytes, dict, list)) else None
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
        g = _as_list(got)
        return g is not None and len(g) == 2 and str(g[0]).lower() == side and match(v, g[1])
    if t == "array":
        g = _as_list(got)
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
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return key_canon(v[0])
    if isinstance(v, (list, tuple)):
        return repr([key_canon(f) for f in v])
    if isinstance(v, np.integer):
        return str(int(v))
    return str(v)


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
        res["example"] = _exc(e)
        res["where"] = _where(e)
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
    for i, k in enumerate(keys):
        by_key.setdefault(key_canon(k), []).append(i)
    wrong_ex = raw_ex = missing_ex = None
    for e in ents:
        cand = by_key.get(key_canon(e["key"]), [])
        if "namespace" in e:
            cand = [i for i in cand if match(e["namespace"], nss[i])]
        if "user_key" in e:
            cand = [i for i in cand if match(e["user_key"], uks[i])]
        if not cand:
            near = by_key.get(key_canon(e["key"]), [])
            if near and all(_is_raw(vals[i]) for i in near):  # e.g. a whole list left raw in one row
                res["raw"] += 1
                raw_ex = raw_ex or (e, vals[near[0]])
                continue
            res["missing"] += 1
            missing_ex = missing_ex or e
            continue
        if "value" not in e or any(match(e["value"], vals[i]) for i in cand):
            res["ok"] += 1
        elif all(_is_raw(vals[i]) for i in cand):
            res["raw"] += 1
            raw_ex = raw_ex or (e, vals[cand[0]])
        else:
            res["wrong"] += 1
            wrong_ex = wrong_ex or (e, vals[cand[0]])
    fully_asserted = all("user_key" in e or spec["kind"] in ("value", "reducing", "aggregating") for e in ents)
    if fully_asserted and len(df) > len(ents):
        res["extra"] = len(df) - len(ents)
    state_notes = _notes_for(notes, op, state)
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


def _notes_for(notes: list[str], op: str, state: str) -> list[str]:
    """The reader's notes about this operator's state, without the snapshot path in front."""
    out = []
    for n in notes:
        if f"'{op}'" in n and f"'{state}'" in n:
            out.append(n.split("): ", 1)[-1] if "_metadata (" in n else n)
    return out


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    for fr in reversed(tb):
        if "/explorer/" in fr.filename:
            return f"{fr.filename.split('/explorer/')[-1]}:{fr.lineno} ({fr.name})"
    return ""


def check_fixture(path: Path) -> dict:
    exp = json.loads((path / "EXPECTED.json").read_text())
    out: dict[str, Any] = {"name": path.name, "flink": exp.get("flink_version"), "backend": exp.get("backend"),
                           "kind": exp.get("kind"), "job": exp.get("job"), "size_kb": _size_kb(path),
                           "checks": {}, "states": [], "value_types": {}}
    try:
        snap = explorer.open(path, uids=exp.get("uids") or None)
    except Exception as e:  # noqa: BLE001
        out["checks"]["open"] = "EXC " + _exc(e) + f" [{_where(e)}]"
        for uid, op in exp["operators"].items():  # every state of the snapshot is unreadable
            for state, spec in op["states"].items():
                out["states"].append({"operator": uid, "state": state, "kind": spec["kind"], "type": spec["type"],
                                      "expected": len(spec["entries"]), "status": "EXC",
                                      "example": "explorer.open failed: " + _exc(e)[:120], "where": _where(e)})
        return out
    out["checks"]["open"] = "OK"
    states = None
    for name, fn in [
        ("snap.states", lambda: snap.states),
        ("snap.notes", lambda: snap.notes),
        ("hot_keys", lambda: snap.hot_keys()),
        ("key_group_distribution", lambda: snap.key_group_distribution()),
        ("diff(self)", lambda: explorer.diff(snap, snap)),
    ]:
        try:
            r = fn()
            out["checks"][name] = "OK" + (f" ({len(r)} rows)" if hasattr(r, "__len__") else "")
            if name == "snap.states":
                states = r
        except Exception as e:  # noqa: BLE001
            out["checks"][name] = "EXC " + _exc(e) + f" [{_where(e)}]"
    if exp.get("operator_match", "uid") == "uid" and exp.get("uids"):
        try:  # what a user who does not know the uids sees
            plain = explorer.open(path)
            named = set(plain.operators["operator"])
            lost = [u for u in exp["uids"] if u not in named]
            out["checks"]["operator names without uids="] = "OK" if not lost else f"NO: {lost} show as OperatorIDs"
        except Exception as e:  # noqa: BLE001
            out["checks"]["operator names without uids="] = "EXC " + _exc(e)
    if "checkpoint" in (exp.get("kind") or ""):
        try:
            h = explorer.history(path)
            out["checks"]["history"] = f"OK ({len(h)} rows)"
        except Exception as e:  # noqa: BLE001
            out["checks"]["history"] = "EXC " + _exc(e) + f" [{_where(e)}]"
    try:
        notes = list(snap.notes)
    except Exception:  # noqa: BLE001
        notes = []
    if states is not None:
        snap_ops = sorted(set(states["operator"]))
    else:  # snap.states failed: take the operators from the metadata and still try every state
        try:
            ops = snap.operators
            snap_ops = sorted(ops[ops["has_keyed_state"]]["operator"])
        except Exception:  # noqa: BLE001
            snap_ops = []
    out["operators_found"] = snap_ops
    for uid, op in exp["operators"].items():
        real = resolve_operator(snap_ops, uid, exp.get("operator_match", "uid"))
        for state, spec in op["states"].items():
            if real is None:
                out["states"].append({"operator": uid, "state": state, "kind": spec["kind"], "type": spec["type"],
                                      "expected": len(spec["entries"]), "status": "MISSING",
                                      "example": f"operator {uid!r} not found; reader shows {snap_ops}"})
                continue
            if states is not None:
                sel = states[(states["operator"] == real) & (states["state"] == state)]
                if len(sel) == 0:
                    have = sorted(states[states["operator"] == real]["state"])
                    out["states"].append({"operator": real, "state": state, "kind": spec["kind"], "type": spec["type"],
                                          "expected": len(spec["entries"]), "status": "MISSING",
                                          "example": f"state not listed; operator has {have}"})
                    continue
                vt = sel.iloc[0]["value_type"]
                out["value_types"][(real, state)] = vt
            # after keyed_state, notes may grow (the reader adds them while decoding)
            r = check_state(snap, real, state, spec, notes)
            try:
                notes = list(snap.notes)
                if r["status"] != "OK" and "note" not in r and "note:" not in r["example"]:
                    sn = _notes_for(notes, real, state)
                    if sn:
                        r["note"] = sn[0][:200]
            except Exception:  # noqa: BLE001
                pass
            r["operator"] = real
            r["value_type"] = out["value_types"].get((real, state), "")
            out["states"].append(r)
    out["notes"] = notes
    return out


def _size_kb(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) // 1024


# --------------------------------------------------------------------------- report
def render(results: list[dict]) -> str:
    lines = ["# Survey: the reader on production-style Flink fixtures", "",
             "Written by `tools/flink/check_fixtures.py` (do not edit by hand); fixtures from "
             "`tools/flink/make_fixtures.sh` (`make flink-fixtures`), expected values from each job's EXPECTED.json.",
             "Statuses: OK; WRONG (decoded to another value, example shown); RAW (bytes, reader note shown); "
             "MISSING (state/rows absent); EXC (exception, type and first line, and the explorer frame it came from).",
             "An expected entry without a `value` (SQL accumulators, CEP NFA state, Top-N rows: internal layouts) is OK "
             "when a row with its key (namespace, user key) is there: presence, not decoding.",
             ""]
    tot: dict[str, int] = {}
    lines += ["## Summary", "", "| fixture | Flink | backend | kind | KB | open | states OK / total | failing checks |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        ok = sum(1 for s in r["states"] if s["status"] == "OK")
        for s in r["states"]:
            k = s["status"].split(" ")[0]
            tot[k] = tot.get(k, 0) + 1
        bad = [k for k, v in r["checks"].items() if not v.startswith("OK")]
        lines.append(f"| {r['name']} | {r['flink']} | {r['backend']} | {r['kind']} | {r['size_kb']} | "
                     f"{r['checks'].get('open', '')[:3]} | {ok} / {len(r['states'])} | {', '.join(bad) or '-'} |")
    lines += ["", "State results over all fixtures: " + ", ".join(f"{k} {v}" for k, v in sorted(tot.items())), ""]
    lines += _by_cause(results)
    for r in results:
        lines += [f"## {r['name']}", "",
                  f"Flink {r['flink']}, {r['backend']}, {r['kind']}, job `{r['job']}`, {r['size_kb']} KB.", ""]
        for k, v in r["checks"].items():
            lines.append(f"- `{k}`: {v}")
        if r.get("notes"):
            lines.append(f"- reader notes ({len(r['notes'])}): " + " | ".join(n[:160] for n in r["notes"][:4]))
        lines.append("")
        if r["states"]:
            lines += ["| operator | state | kind | job's type | reader's value_type | result | example / note |",
                      "|---|---|---|---|---|---|---|"]
            for s in r["states"]:
                ex = s.get("example", "")
                if s.get("where"):
                    ex += f" [{s['where']}]"
                if s.get("note"):
                    ex += f" — note: {s['note']}"
                ex = ex.replace("|", "\\|").replace("\n", " ")
                lines.append(f"| {s.get('operator', '')} | {s['state']} | {s['kind']} | {s['type']} | "
                             f"{str(s.get('value_type', '')).replace('|', '/')} | {s['status']} | {ex} |")
            lines.append("")
    return ("\n".join(lines) + "\n").replace(str(ROOT) + "/", "")


def _generic(text: str) -> str:
    """An error text without the fixture's path and operator/subtask, so equal causes group together."""
    text = re.sub(r"\S*/((chk-\d+/)?_metadata)", r"\1", text)
    text = re.sub(r" \(operator '[^']*', subtask \d+\)", "", text)
    return re.sub(r"\b\d{6}\.sst\b", "NNNNNN.sst", text)


def _by_cause(results: list[dict]) -> list[str]:
    """Failing states grouped by what they fail on: the reader's value type (serializer snapshot) or the error."""
    groups: dict[tuple[str, str], list[str]] = {}
    examples: dict[tuple[str, str], str] = {}
    for r in results:
        for s in r["states"]:
            st = s["status"].split(" ")[0]
            if st == "OK":
                continue
            cause = str(s.get("value_type") or "")
            if st == "EXC":
                cause = (s.get("example", "").split(":")[0] + " in " + s.get("where", "")).strip()
            elif not cause:
                cause = "value type unknown (snap.states failed); " + s.get("example", "")[:60]
            if st == "MISSING" and "the rest of that key group is skipped" in s.get("example", ""):
                ex = s["example"]
                cause = "key groups skipped after an undecodable value of " + ex[ex.find("(") + 1: ex.find(")")]
            k = (st, cause)
            groups.setdefault(k, []).append(f"{r['name']}:{s['state']}")
            examples.setdefault(k, s.get("example", "") + (f" — note: {s['note']}" if s.get("note") else ""))
    for r in results:
        for c, v in r["checks"].items():
            if not v.startswith("OK"):
                k = ("CHECK " + c, _generic(v[4:].split(" [")[0])[:160])
                groups.setdefault(k, []).append(r["name"])
                examples.setdefault(k, v)
    out = ["## Failures by cause", "",
           "Each row: what fails (status, and the reader's value type = the serializer it met, or the exception and "
           "the explorer frame), how many states/fixtures, which, and one example.", "",
           "| status | cause | count | where | example |", "|---|---|---|---|---|"]
    for (st, cause), where in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ex = examples[(st, cause)].replace("|", "\\|").replace("\n", " ")[:300]
        ws = ", ".join(where[:6]) + (f" (+{len(where) - 6})" if len(where) > 6 else "")
        out.append(f"| {st} | {cause.replace('|', '/')} | {len(where)} | {ws} | {ex} |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=str(ROOT / "sample_data" / "flink" / "production"))
    ap.add_argument("--out", default=str(ROOT / "tools" / "flink" / "SURVEY.md"))
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args(argv)
    results = []
    for d in sorted(Path(a.root).iterdir()):
        f = d / "EXPECTED.json"
        if not f.is_file() or (a.only and d.name not in a.only):
            continue
        if "operators" not in json.loads(f.read_text()) or not isinstance(json.loads(f.read_text())["operators"], dict) \
                or not any("states" in v for v in json.loads(f.read_text())["operators"].values()):
            continue  # the older StateFixtures.java fixtures: checked by tests/ already
        print(f"== {d.name}", file=sys.stderr)
        r = check_fixture(d)
        results.append(r)
        for s in r["states"]:
            if s["status"] != "OK":
                print(f"   {s.get('operator')}/{s['state']}: {s['status']} {s.get('example', '')[:150]}", file=sys.stderr)
    Path(a.out).write_text(render(results))
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
