"""Check every Spark fixture under sample_data/spark/ against its EXPECTED.json, twice.

    python tools/spark/check_fixtures.py [--root sample_data/spark] [--only NAME,...]
                                         [--survey tools/spark/SURVEY.md] [--max-keys N]

1. Through the project's reader: ``explorer.open(path)``, ``keyed_state()``,
   ``keyed_state(key=k)`` for every expected key (or ``--max-keys`` of them),
   ``hot_keys()``, ``key_group_distribution()`` and ``explorer.history(path)``.
2. Through Spark's own state data source (``format("statestore")`` with the store's
   ``operatorId`` and ``storeName`` / ``joinSide`` / ``stateVarName`` /
   ``readRegisteredTimers``; format v2 checkpoints with the session's
   ``checkpointFormatVersion`` set to 2), so the fixtures are known right independently
   of our reader.

Comparison: rows are matched on the key's leaf values in order (a key with extra trailing
fields, like a join's index or a session's start, is matched on its leading fields and
noted); values by field name (last path segment) where names are there, positionally
for aggregation buffers (Spark repeats buffer names); list elements as a multiset per
key; TTL expiry within ``expires_at_range_ms``; timers and event-time expiry exactly.
Prints one line per fixture/operator/store and reader, and writes the survey (markdown).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# --- normalising values: shared with the tests --------------------------------------------------
from tests.support.spark_expected import leaves, scalar  # noqa: E402


def as_value(v: Any) -> Any:
    """A JSON-able plain value (for examples in the survey)."""
    from pyspark.sql import Row

    if isinstance(v, Row):
        return {n: as_value(x) for n, x in zip(v.__fields__, tuple(v))}
    if isinstance(v, dict):
        return {k: as_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [as_value(x) for x in v]
    return scalar(v)


# --- comparison -----------------------------------------------------------------------------
class Result:
    def __init__(self, fixture: str, reader: str, op: int, store: str) -> None:
        self.fixture, self.reader, self.op, self.store = fixture, reader, op, store
        self.status = "OK"
        self.detail = ""
        self.notes: list[str] = []
        self.expected = self.actual = 0

    def line(self) -> str:
        s = f"{self.fixture:34s} op {self.op} {self.store:34s} {self.reader:8s} {self.status}"
        s += f" ({self.actual}/{self.expected} rows)"
        if self.detail:
            s += f": {self.detail}"
        if self.notes:
            s += " [" + "; ".join(self.notes) + "]"
        return s


def exp_key(row: dict) -> tuple:
    k = tuple(v for _, v in leaves(row["key"]))
    if "user_key" in row:
        k += tuple(v for _, v in leaves(row["user_key"]))
    return k


def value_matches(exp_row: dict, act_value: list[tuple[str, Any]]) -> tuple[bool, str]:
    if "buffer" in exp_row:
        want = [v for _, v in exp_row["buffer"]]
        got = [v for _, v in act_value]
        if got != want:
            return False, f"buffer {want} != {got}"
        return True, ""
    exp = leaves(exp_row["value"])
    if len(exp) == 1 and len(act_value) == 1 and exp[0][0].split(".")[-1] != act_value[0][0].split(".")[-1]:
        # a one-field struct shown as its field (the explorer unwraps them): compare the value
        if act_value[0][1] != exp[0][1]:
            return False, f"{exp[0][0]}: expected {exp[0][1]!r}, got {act_value[0][1]!r}"
        return True, ""
    by_path = {p: v for p, v in act_value}
    by_last: dict[str, list] = defaultdict(list)
    for p, v in act_value:
        by_last[p.split(".")[-1]].append(v)
    for p, want in exp:
        if p in by_path:
            got = by_path[p]
        elif len(by_last.get(p.split(".")[-1], [])) == 1:
            got = by_last[p.split(".")[-1]][0]
        else:
            return False, f"field {p!r} not in {[q for q, _ in act_value]}"
        if got != want:
            return False, f"{p}: expected {want!r}, got {got!r}"
    return True, ""


def compare(res: Result, store: dict, actual: list[dict], strict_expiry: bool = True) -> Result:
    """``actual``: dicts with 'key' (leaf tuple), 'value' (leaf list), optional 'expires_at_ms', 'matched'.

    ``strict_expiry``: an expected ``expires_at_ms`` must be there (the explorer's ``expires_at``);
    Spark's reader keeps dedup and flatMapGroupsWithState expiry inside the value (checked there)."""
    exp_rows = store["rows"]
    res.expected, res.actual = len(exp_rows), len(actual)
    if not exp_rows and not actual:
        return res
    klen = len(exp_key(exp_rows[0])) if exp_rows else None
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    extra_fields = set()
    for a in actual:
        k = a["key"]
        if klen is not None and len(k) > klen:
            extra_fields.add(len(k) - klen)
            k = k[:klen]
        by_key[k].append(a)
    if extra_fields:
        res.notes.append(f"actual key has {sorted(extra_fields)} extra trailing field(s), matched on the leading ones")
    missing, wrong, examples = 0, 0, []
    exp_by_key: dict[tuple, list[dict]] = defaultdict(list)
    for r in exp_rows:
        exp_by_key[exp_key(r)].append(r)
    for k, rows in exp_by_key.items():
        cands = list(by_key.get(k, []))
        for r in rows:
            if not cands:
                missing += 1
                if len(examples) < 2:
                    examples.append(f"missing key {k}")
                continue
            why = ""
            hit = None
            for i, a in enumerate(cands):
                ok, why_i = value_matches(r, a["value"])
                if ok and "expires_at_ms" in r and (strict_expiry or "expires_at_ms" in a) \
                        and a.get("expires_at_ms") != r["expires_at_ms"]:
                    ok, why_i = False, f"expiry {r['expires_at_ms']} != {a.get('expires_at_ms')}"
                if ok and "expires_at_range_ms" in r:
                    lo, hi = r["expires_at_range_ms"]
                    e = a.get("expires_at_ms")
                    if e is None or not lo <= e <= hi:
                        ok, why_i = False, f"expiry {e} not in [{lo}, {hi}]"
                if ok and "matched" in r and a.get("matched") is not None and a["matched"] != r["matched"]:
                    ok, why_i = False, f"matched {a['matched']} != {r['matched']}"
                if ok:
                    hit = i
                    break
                why = why or why_i
            if hit is None:
                wrong += 1
                if len(examples) < 2:
                    examples.append(f"key {k}: {why}")
            else:
                cands.pop(hit)
    extra = max(0, len(actual) - (len(exp_rows) - missing))
    if missing or wrong or extra:
        parts = []
        if wrong:
            parts.append(f"wrong value in {wrong}")
        if missing:
            parts.append(f"missing {missing}")
        if extra:
            parts.append(f"{extra} unexpected")
        res.status = "WRONG VALUE" if wrong else ("MISSING ROWS" if missing else "EXTRA ROWS")
        res.detail = ", ".join(parts) + (" - e.g. " + " | ".join(examples) if examples else "")
    return res


def exc_text(exc: BaseException) -> str:
    """Type and first line; for a Py4J error the JVM's root cause (Py4J's own first line says nothing)."""
    text = str(exc).strip().splitlines()
    out = f"{type(exc).__name__}: {(text[0] if text else '')[:300]}"
    seen = exc
    while seen is not None:  # the project's errors wrap Spark's: look through the chain
        java = getattr(seen, "java_exception", None)
        if java is not None:
            try:
                root = java
                while root.getCause() is not None:
                    root = root.getCause()
                out += f" <- root cause {root.toString().splitlines()[0][:300]}"
            except Exception:  # noqa: BLE001 - the JVM may be gone
                pass
            break
        seen = seen.__cause__
    return out


# --- Spark's own reader ---------------------------------------------------------------------
def spark_rows(spark, path: Path, doc: dict, op: dict, store: dict) -> list[dict]:
    r = spark.read.format("statestore").option("path", str(path)).option("operatorId", op["operator_id"])
    kind = store["kind"]
    if kind == "join_rows":
        r = r.option("joinSide", store["join_side"])
    elif store["state_var"] is not None and kind.endswith("_timer"):
        r = r.option("readRegisteredTimers", "true")
    elif store["state_var"] is not None:
        r = r.option("stateVarName", store["state_var"])
    else:
        r = r.option("storeName", store["store_name"])
    rows = r.load().collect()
    out = []
    for row in rows:
        d = row.asDict()
        key = tuple(v for _, v in leaves(d["key"]))
        a: dict[str, Any] = {"key": key}
        if kind.endswith("_timer"):
            a["value"] = []
            a["expires_at_ms"] = d["expiration_timestamp_ms"]
        else:
            col = {"map": "user_map_value", "list": "list_element"}.get(kind, "value")
            v = d[col]
            if kind == "map":
                a["key"] = key + tuple(x for _, x in leaves(d["user_map_key"]))
            a.update(_split_value(v))
        out.append(a)
    return out


def _split_value(v) -> dict:
    """Value leaves, with TTL expiry and a join row's 'matched' flag taken out."""
    from pyspark.sql import Row

    a: dict[str, Any] = {}
    if isinstance(v, Row) and "ttlExpirationMs" in v.__fields__:
        a["expires_at_ms"] = v["ttlExpirationMs"]
        v = v["value"]
    lv = leaves(v) if v is not None else []
    if lv and lv[-1][0].endswith("matched"):
        a["matched"] = lv[-1][1]
    a["value"] = lv
    return a


def check_spark(spark, path: Path, doc: dict) -> list[Result]:
    from explorer.readers.spark.layout import foreign_schema_paths, resolved_copy

    out = []
    if foreign_schema_paths(path):
        # a moved checkpoint (the committed fixtures were made in another folder): Spark itself cannot read
        # it, so it reads a folder whose operator metadata points at this copy's own schema files
        path = resolved_copy(path)
    v2 = doc.get("checkpoint_format_version") == 2
    key = "spark.sql.streaming.stateStore.checkpointFormatVersion"
    if v2:
        spark.conf.set(key, "2")
    try:
        for op in doc["operators"]:
            for store in op["stores"]:
                res = Result(doc["fixture"], "spark", op["operator_id"], store["state_var"] or store["store_name"])
                try:
                    compare(res, store, spark_rows(spark, path, doc, op, store),
                            strict_expiry=store["kind"].endswith("_timer"))
                except Exception as exc:  # noqa: BLE001 - survey: record every failure
                    res.status, res.detail, res.expected = "EXCEPTION", exc_text(exc), len(store["rows"])
                out.append(res)
    finally:
        if v2:
            spark.conf.unset(key)
    return out


# --- the project's reader ---------------------------------------------------------------------
def explorer_store_name(store: dict) -> str:
    if store["kind"] == "join_rows":
        return f"{store['join_side']}-keyWithIndexToValue"
    return store["state_var"] or store["store_name"]


def explorer_actual(df, store: dict) -> list[dict]:
    out = []
    for rec in df.itertuples(index=False):
        key = tuple(v for _, v in leaves(rec.key))
        a: dict[str, Any] = {"key": key}
        if store["kind"] == "map":
            a["key"] = key + tuple(v for _, v in leaves(rec.user_key))
        if store["kind"].endswith("_timer"):
            a["value"] = []
            a["expires_at_ms"] = scalar(rec.value)
        else:
            val = rec.value
            a.update(_split_value(val) if not isinstance(val, dict) else {"value": leaves(val)})
            if isinstance(val, dict) and "matched" in val:
                a["matched"] = val["matched"]
            if not isinstance(val, (dict, list, tuple)) and val is not None:
                a["value"] = [("value", scalar(val))]
        e = getattr(rec, "expires_at", None)
        if e is not None and scalar(e) is not None and "expires_at_ms" not in a:
            import pandas as pd

            a["expires_at_ms"] = int(pd.Timestamp(e).value // 1_000_000)
        out.append(a)
    return out


def _user_value(v: Any) -> Any:
    """A key column as a user would pass it: ISO timestamps as pd.Timestamp, structs as dicts."""
    import pandas as pd

    if isinstance(v, dict):
        return {k: _user_value(x) for k, x in v.items()}
    if isinstance(v, str) and len(v) == 24 and v.endswith("Z") and v[10] == "T":
        return pd.Timestamp(v)
    return v


def check_explorer(path: Path, doc: dict, max_keys: int) -> tuple[list[Result], dict[str, str]]:
    import explorer

    results, api = [], {}
    t = time.time()
    try:
        snap = explorer.open(path)
        ops = snap.operators
        api["open"] = f"OK ({time.time() - t:.1f} s, {len(ops)} operators)"
    except Exception as exc:  # noqa: BLE001
        api["open"] = "EXCEPTION " + exc_text(exc)
        for op in doc["operators"]:
            for store in op["stores"]:
                r = Result(doc["fixture"], "explorer", op["operator_id"], explorer_store_name(store))
                r.status, r.detail, r.expected = "EXCEPTION", "open: " + exc_text(exc), len(store["rows"])
                results.append(r)
        return results, api
    names = dict(zip(ops["operator_id"], ops["operator"])) if "operator_id" in ops else {}
    t = time.time()
    try:
        df = snap.keyed_state()
        api["keyed_state()"] = f"OK ({len(df)} rows, {time.time() - t:.1f} s)"
    except Exception as exc:  # noqa: BLE001
        df = None
        api["keyed_state()"] = "EXCEPTION " + exc_text(exc)
    for op in doc["operators"]:
        for store in op["stores"]:
            st = explorer_store_name(store)
            r = Result(doc["fixture"], "explorer", op["operator_id"], st)
            if df is None:
                r.status, r.detail = "EXCEPTION", "keyed_state(): " + api["keyed_state()"][10:]
                r.expected = len(store["rows"])
            elif op["operator_id"] not in names:
                r.status, r.detail = "MISSING ROWS", f"no operator {op['operator_id']} (operators: {names})"
                r.expected = len(store["rows"])
            else:
                sub = df[(df["operator"] == names[op["operator_id"]]) & (df["state"] == st)]
                if sub.empty and len(store["rows"]):
                    have = sorted(set(df.loc[df["operator"] == names[op["operator_id"]], "state"]))
                    r.notes.append(f"states present: {have}")
                try:
                    compare(r, store, explorer_actual(sub, store))
                except Exception as exc:  # noqa: BLE001
                    r.status, r.detail = "EXCEPTION", "compare: " + exc_text(exc)
            results.append(r)
    # keyed_state(key=k) for the expected keys
    keys = []
    for op in doc["operators"]:
        for store in op["stores"]:
            for row in store["rows"]:
                k = row["key"]
                vals = [_user_value(v) for v in k.values()]
                keys.append(vals[0] if len(vals) == 1 else tuple(vals))
    uniq = []
    for k in keys:
        if k not in uniq:
            uniq.append(k)
    sample = uniq if max_keys <= 0 or len(uniq) <= max_keys else uniq[:: max(1, len(uniq) // max_keys)][:max_keys]
    found, err = 0, None
    t = time.time()
    for k in sample:
        try:
            if len(snap.keyed_state(key=k)):
                found += 1
        except Exception as exc:  # noqa: BLE001
            err = exc_text(exc)
            break
    api["keyed_state(key=k)"] = (f"EXCEPTION {err}" if err else
                                 f"{'OK' if found == len(sample) else 'PARTIAL'}: {found} of {len(sample)} keys "
                                 f"found ({len(uniq)} expected keys; {time.time() - t:.1f} s)")
    for name, call in (("hot_keys()", lambda: snap.hot_keys()),
                       ("key_group_distribution()", lambda: snap.key_group_distribution()),
                       ("history(path)", lambda: explorer.history(path))):
        t = time.time()
        try:
            res = call()
            extra = ""
            if name == "key_group_distribution()" and df is not None and "entries" in res:
                extra = f", entries {int(res['entries'].sum())} vs keyed_state rows {len(df)}"
            if name == "history(path)":
                extra = f", {res['checkpoint_id'].nunique() if 'checkpoint_id' in res else '?'} batches"
            api[name] = f"OK ({len(res)} rows{extra}, {time.time() - t:.1f} s)"
        except Exception as exc:  # noqa: BLE001
            api[name] = "EXCEPTION " + exc_text(exc)
    try:
        api["notes"] = "; ".join(snap.notes) or "-"
    except Exception:  # noqa: BLE001
        pass
    return results, api


def judge_damaged(r: Result, api: dict) -> Result:
    """A damaged checkpoint: raising or noting is right; fewer rows with nothing said is not."""
    noted = r.reader == "explorer" and api.get("notes", "-") not in ("-", "")
    if r.status == "EXCEPTION":
        r.status, r.detail = "OK (raised)", r.detail
    elif noted:
        r.status, r.detail = "OK (noted)", api["notes"][:300]
    elif r.status != "OK":
        r.status = "SILENTLY WRONG"
        r.detail = f"{r.actual} of {r.expected} rows, no error, no note; " + r.detail
    else:
        r.status = "OK (read all)"
    return r


# --- main -------------------------------------------------------------------------------------
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=str(ROOT / "sample_data" / "spark"))
    p.add_argument("--only", default="")
    p.add_argument("--survey", default="")
    p.add_argument("--max-keys", type=int, default=25, help="keyed_state(key=k) for at most N keys (0: all)")
    p.add_argument("--no-explorer", action="store_true")
    p.add_argument("--no-spark", action="store_true")
    a = p.parse_args(argv)
    os.environ["TZ"] = "UTC"
    time.tzset()
    sys.path.insert(0, str(Path.cwd()))
    import explorer
    from explorer.spark import get_spark

    print(f"explorer from {explorer.__file__}", file=sys.stderr)
    spark = get_spark()
    fixtures = sorted(p for p in Path(a.root).iterdir() if (p / "EXPECTED.json").is_file())
    if a.only:
        fixtures = [p for p in fixtures if p.name in set(a.only.split(","))]
    all_results, apis, docs = [], {}, {}
    for path in fixtures:
        doc = json.loads((path / "EXPECTED.json").read_text())
        docs[path.name] = doc
        res = []
        if not a.no_explorer:
            try:
                r, api = check_explorer(path, doc, a.max_keys)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                r, api = [], {"check": "EXCEPTION " + exc_text(exc)}
            res += r
            apis[path.name] = api
            for k, v in api.items():
                print(f"{path.name:34s} {k:28s} {v}", flush=True)
        if not a.no_spark:
            res += check_spark(spark, path, doc)
        if doc.get("damaged"):
            res = [judge_damaged(r, apis.get(path.name, {})) for r in res]
        for r in res:
            print(r.line(), flush=True)
        all_results += res
    if a.survey:
        write_survey(Path(a.survey), all_results, apis, docs, fixtures)
    bad = [r for r in all_results if r.reader == "spark" and not r.status.startswith("OK")]  # "OK (raised)" too
    return 1 if bad else 0


def _root_first(detail: str) -> str:
    """The JVM's root cause first (the wrapping messages are long and alike), the rest shortened."""
    if " <- root cause " not in detail:
        return detail
    head, root = detail.split(" <- root cause ", 1)
    return f"root cause {root} (from: {head[:160]}...)"


def write_survey(path: Path, results: list[Result], apis: dict, docs: dict, fixtures: list[Path]) -> None:
    lines = ["# Spark fixtures: survey of the explorer's reader (generated)", "",
             "Generated by `tools/spark/check_fixtures.py --survey tools/spark/SURVEY.md` over "
             "`sample_data/spark/*` (made by `tools/spark/make_fixtures.py`). `spark` = Spark's own "
             "`statestore` data source (proves the fixture and EXPECTED.json right); `explorer` = "
             "`explorer.open(path).keyed_state()` compared store by store.", "",
             "## Fixtures", "", "| fixture | Spark | provider | changelog | format | size | description |",
             "|---|---|---|---|---|---|---|"]
    for f in fixtures:
        d = docs[f.name]
        size = sum(p.stat().st_size for p in f.rglob("*") if p.is_file())
        lines.append(f"| {f.name} | {d['spark_version']} | {d['provider']} | {'-' if d['changelog'] is None else d['changelog']} | "
                     f"v{d['checkpoint_format_version']} | {size / 1024:.0f} KiB | {d['description']} |")
    lines += ["", "## Store by store", "", "| fixture | op | store | Spark's reader | explorer | explorer detail |",
              "|---|---|---|---|---|---|"]
    # pair explorer and spark results by position within a fixture
    per_fixture = defaultdict(lambda: {"spark": [], "explorer": []})
    for r in results:
        per_fixture[r.fixture][r.reader].append(r)
    for fx, d in per_fixture.items():
        for i in range(max(len(d["spark"]), len(d["explorer"]))):
            s = d["spark"][i] if i < len(d["spark"]) else None
            e = d["explorer"][i] if i < len(d["explorer"]) else None
            ref = s or e

            def cell(x):
                if x is None:
                    return "-"
                return f"{x.status} ({x.actual}/{x.expected})"
            detail = "" if e is None else (_root_first(e.detail) + (" [" + "; ".join(e.notes) + "]" if e.notes else ""))
            if s is not None and not s.status.startswith("OK"):
                detail += f" **Spark's reader: {_root_first(s.detail)}**"
            lines.append(f"| {fx} | {ref.op} | {ref.store} | {cell(s)} | {cell(e)} | "
                         f"{detail.replace('|', '/')[:700]} |")
    lines += ["", "## The explorer's API per fixture", ""]
    calls = ["open", "keyed_state()", "keyed_state(key=k)", "hot_keys()", "key_group_distribution()",
             "history(path)", "notes"]
    lines += ["| fixture | " + " | ".join(calls) + " |", "|---" * (len(calls) + 1) + "|"]
    for fx, api in apis.items():
        lines.append(f"| {fx} | " + " | ".join(str(api.get(c, "-")).replace("|", "/")[:300] for c in calls) + " |")
    marker = "<!-- generated by check_fixtures.py below; edit above -->"
    head = ""
    if path.is_file() and marker in path.read_text():
        head = path.read_text().split(marker)[0]
    body = "\n".join(lines).replace(str(ROOT) + "/", "")  # paths relative to the repository
    path.write_text(head + marker + "\n\n" + body + "\n")


if __name__ == "__main__":
    sys.exit(main())
