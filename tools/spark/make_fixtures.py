"""Real Spark Structured Streaming checkpoints under sample_data/spark/, each with its expected state.

    python tools/spark/make_fixtures.py [--out sample_data/spark] [--only NAME,...] [--list]

(``make spark-fixtures`` runs it with PySpark 4.3 and, with ``--spark35``, a second time
with a PySpark 3.5 venv.) Each fixture is an ordinary streaming query, written as one would
in production, run over a fixed input to a checkpoint folder ``<out>/<name>/``:

* input: JSON-lines files, one per micro-batch (``maxFilesPerTrigger=1``, trigger
  ``availableNow``), made from a fixed seed (2026); event times start 2026-01-01T00:00Z
  and have millisecond jitter so no event time lands on a watermark (no boundary cases);
  the input files live in a temporary folder that is deleted afterwards (the checkpoint's
  ``sources/`` log names them, as in production);
* the last input batch of the event-time queries never raises the maximum event time, so a
  trailing no-data batch, if Spark runs one, evicts nothing more: the final state does not depend
  on it; the dedup inputs re-send some events up to two batches later, and those that are late by
  then (event time <= watermark) are dropped, in Spark and in the model;
* the join watermarks are hours behind the data (nothing is evicted); ``transformWithStateInPandas``
  runs in ProcessingTime mode with a 2-second trigger until its input is read (see ``stop_when_done``);
* ``damaged-*``: copies of a finished fixture with one part deleted (``"damaged"`` in their
  EXPECTED.json says what and what a reader should do), made after the runs;
* ``spark.sql.shuffle.partitions=4`` (small fixtures; it is frozen into the checkpoint);
  ``spark.sql.session.timeZone=UTC``; ``local[2]``.

``EXPECTED.json`` is computed from the input by plain Python (a model of the operator's
semantics: watermark = max event time of earlier batches - delay, eviction after each batch),
never by reading the state back. Its schema::

    {
      "fixture": name, "spark_version": "4.3.0", "description": "...",
      "query": "the query's code, as text",
      "provider": "hdfs" | "rocksdb", "changelog": bool|null, "checkpoint_format_version": 1|2,
      "conf": {spark settings the query ran with},
      "input_batches": n, "final_watermark_ms": ms or null,
      "run": {"started_ms": ..., "finished_ms": ...},     # wall clock of the run (processing time)
      "copied_from": "/abs/original/path" (copied fixtures only),
      "operators": [
        {"operator_id": 0, "spark_operator": "stateStoreSave" (Spark's name in state-metadata),
         "role": "aggregation" | "window" | "session_window" | "dedupe" | "dedupe_within_watermark"
                 | "join" | "flatMapGroupsWithState" | "transformWithState",
         "stores": [
           {"store_name": "default" | "left-keyToNumValues" | ...,
            "join_side": "left"|"right" (join sides, read with Spark's joinSide option) | null,
            "state_var": TWS state variable name | null,
            "kind": "value" | "list" | "map" | "event_timer" | "processing_timer" | "join_rows",
            "ttl_ms": TWS TTL | null,
            "key_columns": [...], "value_fields": [...],
            "rows": [ {"key": {col: v}, "value": {field: v},
                       "user_key": {col: v} (map entries only),
                       "buffer": [[spark_buffer_name, v], ...] (aggregations: Spark's buffer in order),
                       "expires_at_ms": ms (timers and event-time expiry, exact),
                       "expires_at_range_ms": [lo, hi] (processing-time TTL: run window + ttl)} ]}]}]}

Values: integers as JSON ints (64-bit exact), doubles as floats, timestamps as ISO-8601
UTC strings with milliseconds (``2026-01-01T00:05:00.123Z``), structs as nested objects.
Lists: one row per element, in insertion order. Aggregation values are named
``<alias>.<buffer>`` (``avg_amount.sum``) so repeated buffer names (``sum``, ``count``)
stay distinct; ``buffer`` keeps Spark's own names in Spark's order.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
SEED = 2026
T0_MS = 1767225600000  # 2026-01-01T00:00:00Z
MIN = 60_000
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# --- input -----------------------------------------------------------------------------------
def make_events(seed: int, batches: int = 6, per_batch: int = 60, users: int = 40, items: int = 6,
                dup_share: float = 0.0) -> list[list[dict]]:
    """Events in ``batches`` files: batch b (b < last) covers event time [10b, 10b+10) minutes,
    the last batch lies in [max - 4 min, max] so it never raises the max event time."""
    rnd = random.Random(seed)
    out: list[list[dict]] = []
    eid = 0
    for b in range(batches):
        rows = []
        for _ in range(per_batch):
            if b < batches - 1:
                ts = T0_MS + b * 10 * MIN + rnd.randrange(10 * MIN)
            else:
                top = max(r["ts_ms"] for batch in out for r in batch)
                ts = top - rnd.randrange(4 * MIN)
            # a skewed key distribution: a few hot users
            u = min(int(rnd.paretovariate(1.2)) - 1, users - 1) if rnd.random() < 0.3 else rnd.randrange(users)
            rows.append({"event_id": f"e{eid:05d}", "user": f"u{u:03d}", "item": f"i{rnd.randrange(items)}",
                         "amount": rnd.randrange(1, 500), "qty": rnd.randrange(1, 5), "ts_ms": ts})
            eid += 1
        out.append(rows)
    if dup_share:  # re-sent events: the same id and event time, in the same or a later batch
        for b in range(batches):
            for r in list(out[b]):
                if rnd.random() < dup_share:
                    later = min(b + rnd.randrange(3), batches - 1)
                    out[later].append(dict(r))
    return out


def watermarks(batches: list[list[dict]], delay_ms: int, col: str = "ts_ms") -> list[int]:
    """The eviction watermark of each batch: max event time of earlier batches - delay (0 at first)."""
    wms, top = [], None
    for rows in batches:
        wms.append(0 if top is None else max(0, top - delay_ms))
        m = max(r[col] for r in rows)
        top = m if top is None else max(top, m)
    for w in wms:  # no boundary cases
        assert all(r[col] != w for rows in batches for r in rows), "an event time equals a watermark"
    return wms


def write_input(folder: Path, batches: list[list[dict]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(batches):
        f = folder / f"batch-{i:03d}.json"
        f.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        os.utime(f, (1_700_000_000 + i * 10, 1_700_000_000 + i * 10))  # file order = batch order


# --- fixtures --------------------------------------------------------------------------------
@dataclass
class Fixture:
    name: str
    description: str
    inputs: Callable[[], dict[str, list[list[dict]]]]   # source name -> batches
    query: Callable[..., Any]                            # (spark, {source: df}) -> DataStreamWriter
    expected: Callable[[dict[str, list[list[dict]]]], dict]
    provider: str = "rocksdb"
    changelog: bool | None = True
    format_version: int = 1
    spark: str = "4"
    conf: dict[str, str] = field(default_factory=dict)
    copy_to: str | None = None  # also copy the finished checkpoint here, then delete the original
    stop_when_done: bool = False  # default trigger and stop once the input is read (ProcessingTime mode)
    #: stop after this many input batches and restart the query on the same checkpoint with ``restart_conf``
    #: (a query whose settings changed between runs, as in production)
    restart_after: int | None = None
    restart_conf: dict[str, str] = field(default_factory=dict)


EVENT_SCHEMA = "event_id STRING, user STRING, item STRING, amount BIGINT, qty BIGINT, ts_ms BIGINT"
JOIN_IMP_SCHEMA = "imp_id STRING, ad_id STRING, imp_ts_ms BIGINT"
JOIN_CLICK_SCHEMA = "click_id STRING, click_ad_id STRING, click_ts_ms BIGINT"


def _events(seed=SEED, **kw):
    return lambda: {"events": make_events(seed, **kw)}


def _store(name="default", kind="value", rows=(), key_columns=(), value_fields=(), **kw) -> dict:
    d = {"store_name": name, "join_side": None, "state_var": None, "kind": kind, "ttl_ms": None,
         "key_columns": list(key_columns), "value_fields": list(value_fields)}
    d.update(kw)
    d["rows"] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))
    return d


def _op(op_id: int, spark_operator: str, role: str, stores: list[dict]) -> dict:
    return {"operator_id": op_id, "spark_operator": spark_operator, "role": role, "stores": stores}


# groupBy(user).agg(count, avg, sum, sum, min, max) --------------------------------------------
AGG_QUERY = """
from pyspark.sql import functions as F
per_user = (events.groupBy("user")
            .agg(F.count("*").alias("n"), F.avg("amount").alias("avg_amount"),
                 F.sum("amount").alias("total_amount"), F.sum("qty").alias("total_qty"),
                 F.min("amount").alias("min_amount"), F.max("amount").alias("max_amount")))
sink = per_user.writeStream.outputMode("update").format("noop")
"""


def agg_expected(inputs) -> dict:
    acc: dict[str, list[int]] = {}
    for rows in inputs["events"]:
        for r in rows:
            a = acc.setdefault(r["user"], [0, 0, 0, None, None])
            a[0] += 1
            a[1] += r["amount"]
            a[2] += r["qty"]
            a[3] = r["amount"] if a[3] is None else min(a[3], r["amount"])
            a[4] = r["amount"] if a[4] is None else max(a[4], r["amount"])
    rows = []
    for u, (n, amt, qty, lo, hi) in acc.items():
        buf = [["count", n], ["sum", float(amt)], ["count", n], ["sum", amt], ["sum", qty], ["min", lo], ["max", hi]]
        names = ["n.count", "avg_amount.sum", "avg_amount.count", "total_amount.sum", "total_qty.sum",
                 "min_amount.min", "max_amount.max"]
        rows.append({"key": {"user": u}, "value": {k: v for k, (_, v) in zip(names, buf)}, "buffer": buf})
    return {"final_watermark_ms": None, "operators": [_op(0, "stateStoreSave", "aggregation", [
        _store(rows=rows, key_columns=["user"], value_fields=[b for b, _ in rows[0]["buffer"]])])]}


def agg_query(spark, src):
    ns: dict[str, Any] = {"events": src["events"]}
    exec(AGG_QUERY, ns)  # noqa: S102 - our own query text, kept as text for EXPECTED.json
    return ns["sink"]


# event-time windows ---------------------------------------------------------------------------
TUMBLING_QUERY = """
from pyspark.sql import functions as F
counts = (events.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
          .withWatermark("ts", "15 minutes")
          .groupBy(F.window("ts", "5 minutes"), "user")
          .agg(F.count("*").alias("n"), F.sum("amount").alias("amount")))
sink = counts.writeStream.outputMode("append").format("noop")
"""
SLIDING_QUERY = TUMBLING_QUERY.replace('F.window("ts", "5 minutes")', 'F.window("ts", "10 minutes", "5 minutes")')


def window_expected(length_min: int, slide_min: int, delay_min: int = 15):
    def expected(inputs) -> dict:
        batches = inputs["events"]
        wms = watermarks(batches, delay_min * MIN)
        state: dict[tuple, list[int]] = {}
        for rows, wm in zip(batches, wms):
            for r in rows:
                assert r["ts_ms"] > wm
                first = (r["ts_ms"] - T0_MS) // (slide_min * MIN) * slide_min * MIN + T0_MS
                start = first
                while start > r["ts_ms"] - length_min * MIN:
                    a = state.setdefault((start, r["user"]), [0, 0])
                    a[0] += 1
                    a[1] += r["amount"]
                    start -= slide_min * MIN
            state = {k: v for k, v in state.items() if k[0] + length_min * MIN > wm}  # evict end <= wm
        rows = [{"key": {"window": {"start": iso(s), "end": iso(s + length_min * MIN)}, "user": u},
                 "value": {"n.count": n, "amount.sum": amt}, "buffer": [["count", n], ["sum", amt]]}
                for (s, u), (n, amt) in state.items()]
        return {"final_watermark_ms": wms[-1], "operators": [_op(0, "stateStoreSave", "window", [
            _store(rows=rows, key_columns=["window", "user"], value_fields=["count", "sum"])])]}
    return expected


# session windows -------------------------------------------------------------------------------
SESSION_QUERY = """
from pyspark.sql import functions as F
sessions = (events.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "15 minutes")
            .groupBy(F.session_window("ts", "4 minutes"), "user")
            .agg(F.count("*").alias("n")))
sink = sessions.writeStream.outputMode("append").format("noop")
"""


def session_expected(inputs, gap_ms=4 * MIN, delay_ms=15 * MIN) -> dict:
    batches = inputs["events"]
    wms = watermarks(batches, delay_ms)
    sessions: dict[str, list[list[int]]] = {}  # user -> [start, end, count]
    for rows, wm in zip(batches, wms):
        for r in rows:
            assert r["ts_ms"] > wm
            ss = sessions.setdefault(r["user"], [])
            new = [r["ts_ms"], r["ts_ms"] + gap_ms, 1]
            keep = []
            for s in ss:
                if s[0] < new[1] and new[0] < s[1]:  # overlapping: merge
                    new = [min(s[0], new[0]), max(s[1], new[1]), s[2] + new[2]]
                else:
                    keep.append(s)
            sessions[r["user"]] = sorted(keep + [new])
        for u in list(sessions):
            sessions[u] = [s for s in sessions[u] if s[1] > wm]
            if not sessions[u]:
                del sessions[u]
    rows = [{"key": {"user": u}, "value": {"session_window": {"start": iso(s), "end": iso(e)}, "user": u,
                                          "n.count": n}}
            for u, ss in sessions.items() for s, e, n in ss]
    return {"final_watermark_ms": wms[-1], "operators": [_op(0, "sessionWindowStateStoreSaveExec", "session_window", [
        _store(rows=rows, key_columns=["user"], value_fields=["session_window", "user", "count"],
               note="one row per open session; Spark keys them by (user, session start) and stores the whole "
                    "output row (session_window, user, count) as the value")])]}


# dedup -----------------------------------------------------------------------------------------
DEDUP_QUERY = """
from pyspark.sql import functions as F
unique = (events.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
          .withWatermark("ts", "10 minutes")
          .dropDuplicates(["event_id", "ts"]))
sink = unique.writeStream.outputMode("append").format("noop")
"""
DEDUP_WITHIN_QUERY = """
from pyspark.sql import functions as F
unique = (events.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
          .withWatermark("ts", "10 minutes")
          .dropDuplicatesWithinWatermark(["event_id"]))
sink = unique.writeStream.outputMode("append").format("noop")
"""


def dedup_expected(inputs, delay_ms=10 * MIN) -> dict:
    batches = inputs["events"]
    wms = watermarks(batches, delay_ms)
    state: set[tuple] = set()
    for rows, wm in zip(batches, wms):
        for r in rows:
            if r["ts_ms"] <= wm:  # late (a re-sent event): dropped before the state
                continue
            state.add((r["event_id"], r["ts_ms"]))
        state = {k for k in state if k[1] > wm}  # evict ts <= wm
    rows = [{"key": {"event_id": e, "ts": iso(t)}, "value": {}} for e, t in state]
    return {"final_watermark_ms": wms[-1], "operators": [_op(0, "dedupe", "dedupe", [
        _store(rows=rows, key_columns=["event_id", "ts"], value_fields=[],
               note="Spark stores an empty value (null) per key")])]}


def dedup_within_expected(inputs, delay_ms=10 * MIN) -> dict:
    batches = inputs["events"]
    wms = watermarks(batches, delay_ms)
    state: dict[str, int] = {}
    for rows, wm in zip(batches, wms):
        for r in rows:
            if r["ts_ms"] <= wm:  # late (a re-sent event): dropped before the state
                continue
            state.setdefault(r["event_id"], r["ts_ms"] + delay_ms)
        state = {k: v for k, v in state.items() if v > wm}  # evict expiry <= wm
    rows = [{"key": {"event_id": e}, "value": {"expiresAtMicros": exp * 1000}, "expires_at_ms": exp}
            for e, exp in state.items()]
    return {"final_watermark_ms": wms[-1], "operators": [_op(0, "dedupeWithinWatermark", "dedupe_within_watermark", [
        _store(rows=rows, key_columns=["event_id"], value_fields=["expiresAtMicros"],
               note="value: first event time + watermark delay, in microseconds")])]}


# stream-stream joins ---------------------------------------------------------------------------
def join_inputs(seed=SEED + 7, batches=5, ads=30):
    def make():
        rnd = random.Random(seed)
        imps, clicks = [], []
        n = 0
        for b in range(batches):
            ib, cb = [], []
            for _ in range(40):
                ts = T0_MS + b * 10 * MIN + rnd.randrange(10 * MIN)
                ad = f"ad{rnd.randrange(ads):02d}"
                ib.append({"imp_id": f"m{n:05d}", "ad_id": ad, "imp_ts_ms": ts})
                if rnd.random() < 0.5:
                    cb.append({"click_id": f"c{n:05d}", "click_ad_id": ad,
                               "click_ts_ms": ts + rnd.randrange(1, 25 * MIN)})
                n += 1
            for _ in range(5):  # clicks of ads never shown in this stream (unmatched on the right)
                cb.append({"click_id": f"c{n:05d}", "click_ad_id": f"ad{ads + rnd.randrange(5):02d}",
                           "click_ts_ms": T0_MS + b * 10 * MIN + rnd.randrange(10 * MIN)})
                n += 1
            imps.append(ib)
            clicks.append(cb)
        return {"impressions": imps, "clicks": clicks}
    return make


JOIN_QUERY = """
from pyspark.sql import functions as F
imps = (impressions.withColumn("imp_ts", F.expr("timestamp_millis(imp_ts_ms)"))
        .withWatermark("imp_ts", "2 hours"))
clks = (clicks.withColumn("click_ts", F.expr("timestamp_millis(click_ts_ms)"))
        .withWatermark("click_ts", "3 hours"))
joined = imps.join(clks, F.expr(\"\"\"
    click_ad_id = ad_id AND click_ts >= imp_ts AND click_ts <= imp_ts + interval 1 hour\"\"\"), "{how}")
sink = joined.writeStream.outputMode("append").format("noop")
"""


def join_expected(outer: bool):
    def expected(inputs) -> dict:
        imps = [r for b in inputs["impressions"] for r in b]
        clks = [r for b in inputs["clicks"] for r in b]
        # watermarks are hours behind the data: nothing is evicted, both sides keep every row

        def matches(i, c):
            return c["click_ad_id"] == i["ad_id"] and i["imp_ts_ms"] <= c["click_ts_ms"] <= i["imp_ts_ms"] + 60 * MIN
        stores = []
        for side, rows, kcol in (("left", imps, "ad_id"), ("right", clks, "click_ad_id")):
            out, counts = [], {}
            for r in rows:
                v = dict(r)
                ts_col = "imp_ts" if side == "left" else "click_ts"
                v[ts_col] = iso(r[ts_col + "_ms"])
                matched = any(matches(r, c) for c in clks) if side == "left" else any(matches(i, r) for i in imps)
                row = {"key": {kcol: r[kcol]}, "value": v}
                if outer:
                    row["matched"] = matched
                out.append(row)
                counts[r[kcol]] = counts.get(r[kcol], 0) + 1
            stores.append(_store(name=f"{side}-rows", kind="join_rows", join_side=side, rows=out,
                                 key_columns=[kcol], value_fields=sorted(out[0]["value"]),
                                 note="read with Spark's joinSide option; one row per stored input row"))
            stores.append(_store(name=f"{side}-keyToNumValues", rows=[
                {"key": {kcol: k}, "value": {"value": n}} for k, n in counts.items()],
                key_columns=[kcol], value_fields=["value"]))
        return {"final_watermark_ms": None, "operators": [_op(0, "symmetricHashJoin", "join", stores)]}
    return expected


# applyInPandasWithState ----------------------------------------------------------------------------
PANDAS_STATE_QUERY = """
import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

def track(key, pdfs, state):
    if state.hasTimedOut:
        (events, total, last) = state.get
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "events": [events], "total": [total], "closed": [True]})
        return
    events, total, last = state.get if state.exists else (0, 0, 0)
    for pdf in pdfs:
        events += len(pdf)
        total += int(pdf["amount"].sum())
        last = max(last, int(pdf["ts_ms"].max()))
    state.update((events, total, last))
    state.setTimeoutTimestamp(last + 15 * 60 * 1000)
    yield pd.DataFrame({"user": [key[0]], "events": [events], "total": [total], "closed": [False]})

tracked = (events.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
           .withWatermark("ts", "5 minutes")
           .groupBy("user")
           .applyInPandasWithState(track, "user STRING, events BIGINT, total BIGINT, closed BOOLEAN",
                                   "events BIGINT, total BIGINT, last_ts_ms BIGINT", "Update",
                                   GroupStateTimeout.EventTimeTimeout))
sink = tracked.writeStream.outputMode("update").format("noop")
"""


def pandas_state_expected(inputs, delay_ms=5 * MIN, timeout_ms=15 * MIN) -> dict:
    batches = inputs["events"]
    wms = watermarks(batches, delay_ms)
    state: dict[str, list[int]] = {}
    for rows, wm in zip(batches, wms):
        touched = set()
        for r in rows:
            assert r["ts_ms"] > wm
            s = state.setdefault(r["user"], [0, 0, 0])
            s[0] += 1
            s[1] += r["amount"]
            s[2] = max(s[2], r["ts_ms"])
            touched.add(r["user"])
        for u in list(state):  # event-time timeouts: timeout < watermark, for keys without new data
            if u not in touched and state[u][2] + timeout_ms < wm:
                del state[u]
    rows = [{"key": {"user": u}, "value": {"groupState": {"events": n, "total": t, "last_ts_ms": last},
                                           "timeoutTimestamp": last + timeout_ms},
             "expires_at_ms": last + timeout_ms} for u, (n, t, last) in state.items()]
    return {"final_watermark_ms": wms[-1], "operators": [_op(0, "flatMapGroupsWithState", "flatMapGroupsWithState", [
        _store(rows=rows, key_columns=["user"], value_fields=["groupState", "timeoutTimestamp"])])]}


# transformWithState (rows) -------------------------------------------------------------------------
TWS_ROWS_QUERY = """
from pyspark.sql import Row, functions as F
from pyspark.sql.streaming import StatefulProcessor

class UserActivity(StatefulProcessor):
    # per user: running stats, the recent events (cleared when the user goes quiet for 15 min
    # of event time), and a per-item counter (Spark allows TTL only in ProcessingTime mode)
    def init(self, handle):
        self.handle = handle
        self.stats = handle.getValueState("stats", "events BIGINT, total BIGINT, last_ts_ms BIGINT")
        self.recent = handle.getListState("recent", "event_id STRING, amount BIGINT")
        self.by_item = handle.getMapState("by_item", "item STRING", "n BIGINT, amount BIGINT")

    def handleInputRows(self, key, rows, timerValues):
        events, total, last = self.stats.get() if self.stats.exists() else (0, 0, 0)
        for r in rows:
            events += 1
            total += r.amount
            last = max(last, r.ts_ms)
            self.recent.appendValue((r.event_id, r.amount))
            n, amt = self.by_item.getValue((r.item,)) if self.by_item.containsKey((r.item,)) else (0, 0)
            self.by_item.updateValue((r.item,), (n + 1, amt + r.amount))
        self.stats.update((events, total, last))
        for t in list(self.handle.listTimers()):
            self.handle.deleteTimer(t)
        self.handle.registerTimer(last + 15 * 60 * 1000)
        yield Row(user=key[0], events=events, total=total)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.recent.clear()
        events, total, _ = self.stats.get()
        yield Row(user=key[0], events=events, total=total)

    def close(self):
        pass

activity = (events.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "5 minutes")
            .groupBy("user")
            .transformWithState(UserActivity(), "user STRING, events BIGINT, total BIGINT", "Update", "EventTime"))
sink = activity.writeStream.outputMode("update").format("noop")
"""


def tws_rows_expected(inputs, delay_ms=5 * MIN, quiet_ms=15 * MIN) -> dict:
    batches = inputs["events"]
    wms = watermarks(batches, delay_ms)
    stats, recent, by_item, timers = {}, {}, {}, {}
    for rows, wm in zip(batches, wms):
        for r in rows:
            assert r["ts_ms"] > wm
            u = r["user"]
            s = stats.setdefault(u, [0, 0, 0])
            s[0] += 1
            s[1] += r["amount"]
            s[2] = max(s[2], r["ts_ms"])
            recent.setdefault(u, []).append((r["event_id"], r["amount"]))
            m = by_item.setdefault(u, {}).setdefault(r["item"], [0, 0])
            m[0] += 1
            m[1] += r["amount"]
            timers[u] = s[2] + quiet_ms
        for u, t in list(timers.items()):  # event-time timers fire once the watermark passes them
            if t < wm:
                del timers[u]
                recent.pop(u, None)
    stores = [
        _store(kind="value", state_var="stats", key_columns=["user"], value_fields=["events", "total", "last_ts_ms"],
               rows=[{"key": {"user": u}, "value": {"events": n, "total": t, "last_ts_ms": la}}
                     for u, (n, t, la) in stats.items()]),
        _store(kind="list", state_var="recent", key_columns=["user"], value_fields=["event_id", "amount"],
               rows=[{"key": {"user": u}, "value": {"event_id": e, "amount": a}, "index": i}
                     for u, xs in recent.items() for i, (e, a) in enumerate(xs)]),
        _store(kind="map", state_var="by_item", key_columns=["user"], value_fields=["n", "amount"],
               rows=[{"key": {"user": u}, "user_key": {"item": it}, "value": {"n": n, "amount": a}}
                     for u, m in by_item.items() for it, (n, a) in m.items()]),
        _store(kind="event_timer", state_var="$eventTimers_keyToTimestamp", key_columns=["user"], value_fields=[],
               rows=[{"key": {"user": u}, "value": {}, "expires_at_ms": t} for u, t in timers.items()]),
    ]
    return {"final_watermark_ms": wms[-1],
            "operators": [_op(0, "transformWithStateExec", "transformWithState", stores)]}


# transformWithStateInPandas ---------------------------------------------------------------------------
TWS_PANDAS_QUERY = """
import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

class Basket(StatefulProcessor):
    # per customer id: last order (TTL 30 min of processing time), the order amounts (list),
    # a map from 64-bit product code to quantity, and a processing-time reminder in 1 hour
    def init(self, handle):
        self.handle = handle
        self.last = handle.getValueState("last_order", "order_id STRING, amount BIGINT", ttlDurationMs=30 * 60 * 1000)
        self.amounts = handle.getListState("amounts", "amount BIGINT")
        self.products = handle.getMapState("products", "code BIGINT", "qty BIGINT")

    def handleInputRows(self, key, rows, timerValues):
        for pdf in rows:
            for r in pdf.itertuples(index=False):
                self.last.update((r.order_id, int(r.amount)))
                self.amounts.appendValue((int(r.amount),))
                code = (int(r.code),)
                q = self.products.getValue(code)[0] if self.products.containsKey(code) else 0
                self.products.updateValue(code, (q + int(r.qty),))
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 3600 * 1000)
        yield pd.DataFrame({"customer": [int(key[0])], "orders": [sum(1 for _ in self.amounts.get())]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield pd.DataFrame({"customer": [int(key[0])], "orders": [-1]})

    def close(self):
        pass

baskets = (orders.groupBy("customer")
           .transformWithStateInPandas(Basket(), "customer BIGINT, orders BIGINT", "Update", "ProcessingTime"))
sink = baskets.writeStream.outputMode("update").format("noop")
"""
ORDER_SCHEMA = "order_id STRING, customer BIGINT, code BIGINT, qty BIGINT, amount BIGINT"


def order_inputs(seed=SEED + 11, batches=4, customers=50):
    def make():
        rnd = random.Random(seed)
        out, n = [], 0
        for _ in range(batches):
            rows = []
            for _ in range(50):
                rows.append({"order_id": f"o{n:05d}", "customer": 10_000_000_000 + rnd.randrange(customers),
                             "code": (1 << 62) + rnd.randrange(12) * 1_000_003, "qty": rnd.randrange(1, 4),
                             "amount": rnd.randrange(1, 1000)})
                n += 1
            out.append(rows)
        return {"orders": out}
    return make


def tws_pandas_expected(inputs) -> dict:
    last, amounts, products = {}, {}, {}
    for rows in inputs["orders"]:
        for r in rows:
            c = r["customer"]
            last[c] = (r["order_id"], r["amount"])
            amounts.setdefault(c, []).append(r["amount"])
            p = products.setdefault(c, {})
            p[r["code"]] = p.get(r["code"], 0) + r["qty"]
    stores = [
        _store(kind="value", state_var="last_order", ttl_ms=30 * 60 * 1000, key_columns=["customer"],
               value_fields=["order_id", "amount"],
               rows=[{"key": {"customer": c}, "value": {"order_id": o, "amount": a}, "expires_at_range_ms": "RUN+TTL"}
                     for c, (o, a) in last.items()]),
        _store(kind="list", state_var="amounts", key_columns=["customer"], value_fields=["amount"],
               rows=[{"key": {"customer": c}, "value": {"amount": a}, "index": i}
                     for c, xs in amounts.items() for i, a in enumerate(xs)]),
        _store(kind="map", state_var="products", key_columns=["customer"], value_fields=["qty"],
               rows=[{"key": {"customer": c}, "user_key": {"code": k}, "value": {"qty": q}}
                     for c, p in products.items() for k, q in p.items()]),
        _store(kind="processing_timer", state_var="$procTimers_keyToTimestamp", key_columns=["customer"],
               value_fields=[], note="one timer per customer at its first batch's processing time + 1 h",
               rows=[{"key": {"customer": c}, "value": {}, "expires_at_range_ms": "RUN+3600000"} for c in last]),
    ]
    return {"final_watermark_ms": None,
            "operators": [_op(0, "transformWithStateInPandasExec", "transformWithState", stores)]}


# several stateful operators in one query ------------------------------------------------------------
MULTI_QUERY = """
from pyspark.sql import functions as F
unique = events.dropDuplicates(["event_id"])
per_user = unique.groupBy("user").agg(F.count("*").alias("n"), F.sum("amount").alias("amount"))
sink = per_user.writeStream.outputMode("update").format("noop")
"""


def multi_expected(inputs) -> dict:
    seen, acc = set(), {}
    for rows in inputs["events"]:
        for r in rows:
            if r["event_id"] in seen:
                continue
            seen.add(r["event_id"])
            a = acc.setdefault(r["user"], [0, 0])
            a[0] += 1
            a[1] += r["amount"]
    agg = [{"key": {"user": u}, "value": {"n.count": n, "amount.sum": s}, "buffer": [["count", n], ["sum", s]]}
           for u, (n, s) in acc.items()]
    dd = [{"key": {"event_id": e}, "value": {}} for e in seen]
    return {"final_watermark_ms": None, "operators": [
        _op(0, "stateStoreSave", "aggregation", [_store(rows=agg, key_columns=["user"], value_fields=["count", "sum"])]),
        _op(1, "dedupe", "dedupe", [_store(rows=dd, key_columns=["event_id"], value_fields=[])]),
    ]}


# far-future and far-past timestamps in keys (issue 33) -------------------------------------------------
#: 9999-12-31T00:00:00Z and 1500-01-01T00:00:00Z in microseconds: outside pandas' nanosecond range
FAR_FUTURE_US = 253402214400 * 1_000_000
FAR_PAST_US = -14831769600 * 1_000_000
CONTRACT_SCHEMA = "user STRING, amount BIGINT, valid_to_us BIGINT, ts_ms BIGINT"


def iso_us(us: int) -> str:
    """ISO-8601 UTC with milliseconds of any microsecond timestamp (years 1..9999)."""
    from datetime import timedelta
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def contract_inputs(seed=SEED + 21):
    """Per user a price row valid until an hour, or open-ended (9999-12-31, as warehouses write it), or one
    back-dated to 1500 (a data-entry slip): both outside pandas' ns range."""
    def make():
        out = []
        for rows in make_events(seed, batches=4, per_batch=40, users=12):
            batch = []
            for r in rows:
                v = (FAR_FUTURE_US if r["qty"] == 1 else FAR_PAST_US if r["qty"] == 2 and r["amount"] % 5 == 0
                     else (r["ts_ms"] // (60 * MIN) + 1) * 60 * MIN * 1000)
                batch.append({"user": r["user"], "amount": r["amount"], "valid_to_us": v, "ts_ms": r["ts_ms"]})
            out.append(batch)
        return {"contracts": out}
    return make


FAR_KEYS_QUERY = """
from pyspark.sql import functions as F
per_period = (contracts.withColumn("valid_to", F.expr("timestamp_micros(valid_to_us)"))
              .groupBy("user", "valid_to")
              .agg(F.count("*").alias("n"), F.sum("amount").alias("amount")))
sink = per_period.writeStream.outputMode("update").format("noop")
"""


def far_keys_expected(inputs) -> dict:
    acc: dict[tuple, list[int]] = {}
    for rows in inputs["contracts"]:
        for r in rows:
            a = acc.setdefault((r["user"], r["valid_to_us"]), [0, 0])
            a[0] += 1
            a[1] += r["amount"]
    rows = [{"key": {"user": u, "valid_to": iso_us(v)}, "value": {"n.count": n, "amount.sum": amt},
             "buffer": [["count", n], ["sum", amt]]} for (u, v), (n, amt) in acc.items()]
    return {"final_watermark_ms": None, "operators": [_op(0, "stateStoreSave", "aggregation", [
        _store(rows=rows, key_columns=["user", "valid_to"], value_fields=["count", "sum"],
               note="valid_to 9999-12-31 and 1500-01-01 lie outside pandas' nanosecond range")])]}


# decimals: a decimal key (precision <= 18: a long) and decimal sums (precision 22: bytes) --------------
PRICE_SCHEMA = "user STRING, price DECIMAL(10,2), amount DECIMAL(12,2), ts_ms BIGINT"


def price_inputs(seed=SEED + 23):
    def make():
        rnd = random.Random(seed)
        out = []
        for rows in make_events(seed, batches=4, per_batch=40, users=10):
            out.append([{"user": r["user"], "price": float(f"{rnd.choice([0.99, 1.25, 19.99, 99999999.99, -5.5]):.2f}"),
                         "amount": float(f"{r['amount'] * 1234567.89 / 7:.2f}"), "ts_ms": r["ts_ms"]} for r in rows])
        return {"prices": out}
    return make


DECIMAL_QUERY = """
from pyspark.sql import functions as F
per_price = (prices.groupBy("user", "price")
             .agg(F.count("*").alias("n"), F.sum("amount").alias("total"), F.avg("amount").alias("mean")))
sink = per_price.writeStream.outputMode("update").format("noop")
"""


def decimal_expected(inputs) -> dict:
    from decimal import Decimal
    acc: dict[tuple, list] = {}
    for rows in inputs["prices"]:
        for r in rows:
            a = acc.setdefault((r["user"], Decimal(repr(r["price"]))), [0, Decimal(0)])
            a[0] += 1
            a[1] += Decimal(f"{r['amount']:.2f}")
    rows = []
    for (u, p), (n, tot) in acc.items():
        buf = [["count", n], ["sum", float(tot)], ["isEmpty", False], ["sum", float(tot)], ["count", n]]
        rows.append({"key": {"user": u, "price": float(p)},
                     "value": {"n.count": n, "total.sum": float(tot), "total.isEmpty": False, "mean.sum": float(tot),
                               "mean.count": n}, "buffer": buf, "exact": {"price": str(p), "total": str(tot)}})
    return {"final_watermark_ms": None, "operators": [_op(0, "stateStoreSave", "aggregation", [
        _store(rows=rows, key_columns=["user", "price"], value_fields=["count", "sum", "isEmpty", "sum", "count"],
               note="price decimal(10,2) is a long in the UnsafeRow; the sums are decimal(22,2), bytes in its "
                    "variable part; 'exact' has the decimals as text")])]}


# session windows with several sessions per user and collect_list / collect_set buffers ----------------
SESSION_COLLECT_QUERY = """
from pyspark.sql import functions as F
sessions = (events.withColumn("ts", F.expr("timestamp_millis(ts_ms)"))
            .withWatermark("ts", "15 minutes")
            .groupBy(F.session_window("ts", "2 minutes"), "user")
            .agg(F.count("*").alias("n"), F.collect_list("item").alias("items"),
                 F.collect_set("qty").alias("qtys")))
sink = sessions.writeStream.outputMode("append").format("noop")
"""


def session_collect_expected(inputs, gap_ms=2 * MIN, delay_ms=15 * MIN) -> dict:
    batches = inputs["events"]
    wms = watermarks(batches, delay_ms)
    sessions: dict[str, list[list]] = {}  # user -> [start, end, count, items, qtys]
    for rows, wm in zip(batches, wms):
        for r in rows:
            assert r["ts_ms"] > wm
            ss = sessions.setdefault(r["user"], [])
            new = [r["ts_ms"], r["ts_ms"] + gap_ms, 1, [r["item"]], {r["qty"]}]
            keep = []
            for s in ss:
                if s[0] < new[1] and new[0] < s[1]:
                    new = [min(s[0], new[0]), max(s[1], new[1]), s[2] + new[2], s[3] + new[3], s[4] | new[4]]
                else:
                    keep.append(s)
            sessions[r["user"]] = sorted(keep + [new])
        for u in list(sessions):
            sessions[u] = [s for s in sessions[u] if s[1] > wm]
            if not sessions[u]:
                del sessions[u]
    rows = [{"key": {"user": u}, "value": {"session_window": {"start": iso(s), "end": iso(e)}, "user": u,
                                          "n.count": n},
             "collect": {"items": sorted(items), "qtys": sorted(qtys)}}
            for u, ss in sessions.items() for s, e, n, items, qtys in ss]
    return {"final_watermark_ms": wms[-1], "operators": [_op(0, "sessionWindowStateStoreSaveExec", "session_window", [
        _store(rows=rows, key_columns=["user"], value_fields=["session_window", "user", "count", "buf", "buf"],
               note="several sessions per user; 'collect' has each session's collected items (as sorted lists: "
                    "their order inside Spark's buffer follows its merges)")])]}


def _q(text, how=None):
    def query(spark, src):
        ns: dict[str, Any] = dict(src)
        exec(text.replace("{how}", how) if how else text, ns)  # noqa: S102 - our own query text
        return ns["sink"]
    query.text = text.replace("{how}", how) if how else text
    return query


def fixtures() -> list[Fixture]:
    ev = _events(dup_share=0.0)
    evd = _events(SEED + 3, dup_share=0.15)
    fx = [
        Fixture("agg-hdfs", "groupBy(user).agg(count, avg, sum, sum, min, max) on the HDFS-backed store",
                ev, _q(AGG_QUERY), agg_expected, provider="hdfs", changelog=None),
        Fixture("agg-rocksdb", "the same aggregation on RocksDB, changelog checkpointing off",
                ev, _q(AGG_QUERY), agg_expected, changelog=False),
        Fixture("agg-rocksdb-changelog", "the same aggregation on RocksDB, changelog checkpointing on",
                ev, _q(AGG_QUERY), agg_expected),
        Fixture("agg-rocksdb-v2", "the same aggregation, checkpoint format v2 (RocksDB, changelog on)",
                ev, _q(AGG_QUERY), agg_expected, format_version=2),
        Fixture("window-tumbling", "5-minute tumbling windows per user, 15-minute watermark, append mode",
                ev, _q(TUMBLING_QUERY), window_expected(5, 5)),
        Fixture("window-tumbling-v2", "the tumbling-window query in checkpoint format v2 (RocksDB, changelog on)",
                ev, _q(TUMBLING_QUERY), window_expected(5, 5), format_version=2),
        Fixture("window-tumbling-v2-nochangelog", "the tumbling-window query in checkpoint format v2, RocksDB "
                "with changelog checkpointing off (only <version>_<uuid>.zip files)",
                ev, _q(TUMBLING_QUERY), window_expected(5, 5), format_version=2, changelog=False),
        Fixture("window-sliding-hdfs", "10-minute windows sliding by 5, 15-minute watermark, HDFS-backed store",
                ev, _q(SLIDING_QUERY), window_expected(10, 5), provider="hdfs", changelog=None),
        Fixture("session-window", "session windows (4-minute gap) per user, 15-minute watermark",
                ev, _q(SESSION_QUERY), session_expected),
        Fixture("dedup-watermark-hdfs", "dropDuplicates(event_id, ts) with a 10-minute watermark, HDFS-backed store",
                evd, _q(DEDUP_QUERY), dedup_expected, provider="hdfs", changelog=None),
        Fixture("dedup-within-watermark", "dropDuplicatesWithinWatermark(event_id), 10-minute watermark",
                evd, _q(DEDUP_WITHIN_QUERY), dedup_within_expected),
        Fixture("join-inner-hdfs", "impressions inner join clicks within 1 h, watermarks 2 h / 3 h, HDFS-backed",
                join_inputs(), _q(JOIN_QUERY, "inner"), join_expected(False), provider="hdfs", changelog=None),
        Fixture("join-left-outer", "impressions left outer join clicks within 1 h, watermarks 2 h / 3 h",
                join_inputs(), _q(JOIN_QUERY, "leftOuter"), join_expected(True)),
        Fixture("apply-in-pandas-with-state", "applyInPandasWithState per user, event-time timeout 15 min after "
                "the user's last event, 5-minute watermark; RocksDB without changelog",
                ev, _q(PANDAS_STATE_QUERY), pandas_state_expected, changelog=False),
        Fixture("tws-rows", "transformWithState (rows): ValueState, ListState, MapState, event-time "
                "timers (TTL needs ProcessingTime mode: see tws-pandas)", ev, _q(TWS_ROWS_QUERY), tws_rows_expected),
        Fixture("tws-pandas", "transformWithStateInPandas: ValueState with 30 min TTL, ListState, MapState with "
                "64-bit keys, processing-time timers", order_inputs(), _q(TWS_PANDAS_QUERY), tws_pandas_expected, stop_when_done=True),
        Fixture("tws-pandas-v2", "the transformWithStateInPandas query, checkpoint format v2",
                order_inputs(), _q(TWS_PANDAS_QUERY), tws_pandas_expected, format_version=2,
                stop_when_done=True),
        Fixture("multi-operator-hdfs", "dropDuplicates(event_id) then groupBy(user).agg(count, sum): two "
                "stateful operators in one query, HDFS-backed", evd, _q(MULTI_QUERY), multi_expected,
                provider="hdfs", changelog=None),
        Fixture("tws-rows-copied", "the transformWithState (rows) checkpoint written elsewhere, copied here, "
                "and the original deleted", ev, _q(TWS_ROWS_QUERY), tws_rows_expected, copy_to="tws-rows-copied"),
        # issue 33: the last few percent of real state
        Fixture("far-future-keys", "groupBy(user, valid_to).agg(count, sum) where valid_to is 9999-12-31 or "
                "1500-01-01 for some rows (outside pandas' ns range); RocksDB, changelog on",
                contract_inputs(), _q(FAR_KEYS_QUERY), far_keys_expected),
        Fixture("agg-rocksdb-changelog-restarted", "the aggregation on RocksDB, run 3 batches with changelog "
                "checkpointing off, then restarted with it on (the first batches have no changelog)",
                ev, _q(AGG_QUERY), agg_expected, changelog=False, restart_after=3,
                restart_conf={"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}),
        Fixture("agg-rocksdb-maintained", "the aggregation on RocksDB with changelog on, a snapshot every 2 "
                "versions, 3 batches retained and maintenance every second: old changelogs and zips deleted",
                _events(batches=10, per_batch=20), _q(AGG_QUERY), agg_expected, stop_when_done=True,
                conf={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
                      "spark.sql.streaming.minBatchesToRetain": "3",
                      "spark.sql.streaming.stateStore.maintenanceInterval": "1s"}),
        Fixture("agg-rocksdb-v2-maintained", "the aggregation in checkpoint format v2 (RocksDB, changelog on), a "
                "snapshot every 2 versions, 3 batches retained and maintenance every second: old <v>_<uuid> "
                "changelogs and zips deleted",
                _events(batches=10, per_batch=20), _q(AGG_QUERY), agg_expected, stop_when_done=True,
                format_version=2,
                conf={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
                      "spark.sql.streaming.minBatchesToRetain": "3",
                      "spark.sql.streaming.stateStore.maintenanceInterval": "1s"}),
        Fixture("agg-hdfs-zstd", "the aggregation on the HDFS-backed store with the zstd codec",
                ev, _q(AGG_QUERY), agg_expected, provider="hdfs", changelog=None,
                conf={"spark.sql.streaming.stateStore.compression.codec": "zstd"}),
        Fixture("agg-rocksdb-zstd", "the aggregation on RocksDB, changelog on, changelogs compressed with zstd",
                ev, _q(AGG_QUERY), agg_expected,
                conf={"spark.sql.streaming.stateStore.compression.codec": "zstd"}),
        Fixture("agg-hdfs-snappy", "the aggregation on the HDFS-backed store with the snappy codec",
                ev, _q(AGG_QUERY), agg_expected, provider="hdfs", changelog=None,
                conf={"spark.sql.streaming.stateStore.compression.codec": "snappy"}),
        Fixture("agg-rocksdb-snappy", "the aggregation on RocksDB, changelog on, changelogs compressed with snappy",
                ev, _q(AGG_QUERY), agg_expected,
                conf={"spark.sql.streaming.stateStore.compression.codec": "snappy"}),
        Fixture("agg-decimal-key", "groupBy(user, price decimal(10,2)).agg(count, sum, avg of decimal(12,2)): "
                "decimal keys (longs) and decimal(22,2) buffers (bytes); HDFS-backed",
                price_inputs(), _q(DECIMAL_QUERY), decimal_expected, provider="hdfs", changelog=None),
        Fixture("session-window-collect", "session windows (2-minute gap: several per user) with count, "
                "collect_list(item) and collect_set(qty), 15-minute watermark; HDFS-backed",
                ev, _q(SESSION_COLLECT_QUERY), session_collect_expected, provider="hdfs", changelog=None),
        # Spark 3.5: no operator _metadata
        Fixture("spark35-agg-hdfs", "Spark 3.5: groupBy(user).agg(count, avg, sum, sum, min, max), HDFS-backed",
                ev, _q(AGG_QUERY), agg_expected, provider="hdfs", changelog=None, spark="3.5"),
        Fixture("spark35-dedup-watermark-rocksdb", "Spark 3.5: dropDuplicates(event_id, ts), 10-min watermark, "
                "RocksDB with changelog", evd, _q(DEDUP_QUERY), dedup_expected, spark="3.5"),
        Fixture("spark35-apply-in-pandas-with-state", "Spark 3.5: applyInPandasWithState with event-time timeout, "
                "HDFS-backed", ev, _q(PANDAS_STATE_QUERY), pandas_state_expected, provider="hdfs", changelog=None,
                spark="3.5"),
    ]
    return fx


# --- running ------------------------------------------------------------------------------------
SCHEMAS = {"events": EVENT_SCHEMA, "impressions": JOIN_IMP_SCHEMA, "clicks": JOIN_CLICK_SCHEMA, "orders": ORDER_SCHEMA,
           "contracts": CONTRACT_SCHEMA, "prices": PRICE_SCHEMA}


def session(fx: Fixture):
    from pyspark.sql import SparkSession

    conf = {
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    b = SparkSession.builder.master("local[2]").appName("spark-fixtures")
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def query_conf(fx: Fixture) -> dict[str, str]:
    c = {"spark.sql.shuffle.partitions": "4",
         "spark.sql.streaming.stateStore.providerClass": HDFS if fx.provider == "hdfs" else ROCKSDB}
    if fx.provider == "rocksdb":
        c["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] = str(bool(fx.changelog)).lower()
    if fx.format_version != 1:
        c["spark.sql.streaming.stateStore.checkpointFormatVersion"] = str(fx.format_version)
    c.update(fx.conf)
    return c


def run(fx: Fixture, out: Path) -> dict:
    import pyspark

    spark = session(fx)
    conf = query_conf(fx)
    for k in ("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
              "spark.sql.streaming.stateStore.checkpointFormatVersion"):
        spark.conf.unset(k)
    for k, v in conf.items():
        spark.conf.set(k, v)
    inputs = fx.inputs()
    target = out / fx.name
    if target.exists():
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory(prefix=f"spark-fixture-{fx.name}-") as tmp:
        src = {}
        for name, batches in inputs.items():
            write_input(Path(tmp) / "input" / name, batches)
            src[name] = (spark.readStream.schema(SCHEMAS[name]).option("maxFilesPerTrigger", 1)
                         .json(str(Path(tmp) / "input" / name)))
        where = Path(tmp) / "checkpoint" if fx.copy_to else target
        started = int(time.time() * 1000)
        if fx.restart_after:  # the first run reads the first batches only, the restart the rest
            for name, batches in inputs.items():
                for f in sorted((Path(tmp) / "input" / name).iterdir())[fx.restart_after:]:
                    f.rename(Path(tmp) / f"{name}-{f.name}")
            q = fx.query(spark, src).option("checkpointLocation", str(where)).trigger(availableNow=True).start()
            q.awaitTermination()
            if q.exception() is not None:
                raise RuntimeError(f"{fx.name}: the first run failed: {q.exception()}")
            for name in inputs:
                for f in sorted(Path(tmp).glob(f"{name}-batch-*.json")):
                    f.rename(Path(tmp) / "input" / name / f.name[len(name) + 1:])
            for k, v in fx.restart_conf.items():
                spark.conf.set(k, v)
        w = fx.query(spark, src).option("checkpointLocation", str(where))
        if fx.stop_when_done:
            # ProcessingTime mode runs a no-data batch after every batch, for its timers: availableNow
            # never ends (120+ batches) nor does processAllAvailable(); stop once the input is read
            total = sum(len(b) for v in inputs.values() for b in v)
            q = w.trigger(processingTime="2 seconds").start()
            while sum(p["numInputRows"] for p in q.recentProgress) < total and q.exception() is None:
                time.sleep(0.5)
            q.stop()
        else:
            q = w.trigger(availableNow=True).start()
            q.awaitTermination()
        finished = int(time.time() * 1000)
        if q.exception() is not None:
            raise RuntimeError(f"{fx.name}: the query failed: {q.exception()}")
        if fx.copy_to:
            shutil.copytree(where, target)
    # the input folder and (for copies) the original checkpoint are gone now
    exp = fx.expected(inputs)
    for op in exp["operators"]:
        for st in op["stores"]:
            for r in st["rows"]:
                for k in ("expires_at_range_ms",):
                    if r.get(k) == "RUN+TTL":
                        r[k] = [started + st["ttl_ms"], finished + st["ttl_ms"]]
                    elif isinstance(r.get(k), str) and r[k].startswith("RUN+"):
                        d = int(r[k][4:])
                        r[k] = [started + d, finished + d]
    doc = {
        "fixture": fx.name, "spark_version": pyspark.__version__, "description": fx.description,
        "query": textwrap.dedent(getattr(fx.query, "text", "")).strip(),
        "provider": fx.provider, "changelog": fx.changelog, "checkpoint_format_version": fx.format_version,
        "conf": conf, "input_batches": len(next(iter(inputs.values()))),
        "input_rows": {k: sum(len(b) for b in v) for k, v in inputs.items()},
        "run": {"started_ms": started, "finished_ms": finished},
        **({"copied_from": str(where)} if fx.copy_to else {}),
        **({"restarted": {"after_batches": fx.restart_after, "conf": fx.restart_conf}} if fx.restart_after else {}),
        **exp,
    }
    (target / "EXPECTED.json").write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return doc


# damaged copies: made from a finished fixture by deleting one part (no Spark run)
DAMAGED = {
    "damaged-missing-partition": ("window-tumbling", "state/0/2",
                                  "state partition 2 of operator 0 deleted: a reader must fail or note it, "
                                  "never return the other partitions' rows as the whole state"),
    "damaged-no-operator-metadata": ("window-tumbling", "state/0/_metadata",
                                     "operator 0's _metadata deleted: a reader must fall back (like Spark 3.x "
                                     "checkpoints) or say so, never show 0 operators"),
}


def make_damaged(out: Path, name: str) -> None:
    src, remove, what = DAMAGED[name]
    target = out / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(out / src, target)
    gone = target / remove
    shutil.rmtree(gone) if gone.is_dir() else gone.unlink()
    crc = gone.parent / f".{gone.name}.crc"
    if crc.exists():
        crc.unlink()
    doc = json.loads((target / "EXPECTED.json").read_text())
    doc.update({"fixture": name, "description": f"{doc['description']}; DAMAGED: {what}",
                "damaged": {"copied_from_fixture": src, "removed": remove, "expect": what}})
    (target / "EXPECTED.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{name}: copy of {src} without {remove}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "sample_data" / "spark"))
    p.add_argument("--only", default="")
    p.add_argument("--spark35", action="store_true", help="make the Spark 3.5 fixtures (run with a PySpark 3.5)")
    p.add_argument("--list", action="store_true")
    a = p.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["TZ"] = "UTC"
    time.tzset()
    want = {"3.5" if a.spark35 else "4"}
    todo = [f for f in fixtures() if f.spark in want]
    if a.only:
        names = set(a.only.split(","))
        todo = [f for f in todo if f.name in names]
    if a.list:
        for f in todo:
            print(f.name, "-", f.description)
        return 0
    import pyspark

    if a.spark35 != pyspark.__version__.startswith("3.5"):
        print(f"PySpark {pyspark.__version__} cannot make {'3.5' if a.spark35 else '4.x'} fixtures", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in todo:
        t = time.time()
        doc = run(f, out)
        size = sum(p.stat().st_size for p in (out / f.name).rglob("*") if p.is_file())
        rows = sum(len(s["rows"]) for o in doc["operators"] for s in o["stores"])
        print(f"{f.name}: {rows} expected rows, {size / 1024:.0f} KiB, {time.time() - t:.0f} s", flush=True)
    if not a.spark35:
        for name, (src, _, _) in DAMAGED.items():
            if (not a.only or name in a.only.split(",") or src in a.only.split(",")) and (out / src).is_dir():
                make_damaged(out, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
