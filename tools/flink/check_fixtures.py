"""Survey: read every production-style Flink fixture with the current reader and compare with its EXPECTED.json.

    python tools/flink/check_fixtures.py [sample_data/flink/production] [--out tools/flink/SURVEY.md] [--only NAME...]

For each fixture folder whose EXPECTED.json has an ``operators`` section (written by ProductionFixtures.java,
VersionFixtures runs or pyflink_job.py; schema in tools/flink/README.md) it opens the snapshot with
``explorer.open(path, uids=EXPECTED["uids"], **EXPECTED.get("open_options", {}))`` (what the job declared that
the snapshot does not store, e.g. PyFlink's state kinds), runs ``snap.states``, ``snap.notes``, ``hot_keys()``,
``key_group_distribution()``, ``explorer.diff(snap, snap)`` and, for checkpoint folders,
``explorer.history(path)``, then reads every expected state with ``keyed_state(operator=, state=)`` and
compares every expected entry (key, namespace, user key, value) with the decoded rows.

Per state the result is one of: OK, WRONG (decoded, but a different value; an example is shown), RAW (left
as bytes; the reader's note is shown), MISSING (state or rows absent), EXC (exception type and first line).
Nothing here is a test: it only reports, so the decoder work can start from a precise list.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import explorer  # noqa: E402

from tests.support.flink_expected import (  # noqa: E402  (the comparison, shared with the tests)
    check_state,
    exc_text as _exc,
    notes_for as _notes_for,
    resolve_operator,
    where as _where,
)


def check_fixture(path: Path) -> dict:
    exp = json.loads((path / "EXPECTED.json").read_text())
    out: dict[str, Any] = {"name": path.name, "flink": exp.get("flink_version"), "backend": exp.get("backend"),
                           "kind": exp.get("kind"), "job": exp.get("job"), "size_kb": _size_kb(path),
                           "checks": {}, "states": [], "value_types": {}}
    try:
        snap = explorer.open(path, uids=exp.get("uids") or None, **exp.get("open_options", {}))
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
