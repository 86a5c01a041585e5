"""A small PyFlink DataStream job for issue 15: Row keys, values pickled by Python; writes a savepoint + EXPECTED.json.

    <pyflink venv>/bin/python tools/flink/pyflink_job.py OUT_ROOT NAME

Runs in a separate venv with ``apache-flink`` (tools/flink/make_fixtures.sh makes it under .cache/), never in
the project's venv. The job: a keyed process function keyed by a two-field Row (user, region) keeping
ValueState (Types.PICKLED_BYTE_ARRAY, a dict), ListState of pickled tuples and MapState str -> int; the
expected entries are computed here from the same deterministic input (schema: tools/flink/README.md).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from pyflink.common import Configuration, Row, Types, WatermarkStrategy
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

EVENTS = 120
USERS = ["ana", "bo", "chen", "dara", "eve", "femi"]
REGIONS = ["eu", "us"]
CATS = ["books", "games", "music"]
JOB_ID = "f15000000000000000000000000000a1"


def event(i: int) -> tuple[str, str, str, int]:
    x = (i * 2654435761) % 2**32
    return USERS[x % len(USERS)], REGIONS[(x >> 8) % 2], CATS[(x >> 12) % 3], 1 + (x >> 16) % 50


class Track(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.summary = ctx.get_state(ValueStateDescriptor("summary", Types.PICKLED_BYTE_ARRAY()))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent", Types.PICKLED_BYTE_ARRAY()))
        self.per_cat = ctx.get_map_state(MapStateDescriptor("per_category", Types.STRING(), Types.LONG()))

    def process_element(self, value, ctx):
        user, region, cat, amount, seq = value
        s = self.summary.value() or {"count": 0, "total": 0, "cats": []}
        s["count"] += 1
        s["total"] += amount
        if cat not in s["cats"]:
            s["cats"].append(cat)
        self.summary.update(s)
        self.recent.add((seq, cat, amount / 2))
        self.per_cat.put(cat, (self.per_cat.get(cat) or 0) + 1)
        return iter([])


def gen(i):
    if i < EVENTS:
        u, r, c, a = event(i)
        yield Row(u, r, c, a, i)
    else:
        time.sleep(0.02)


def expected(name: str) -> dict:
    per: dict[tuple[str, str], list] = {}
    for i in range(EVENTS):
        u, r, c, a = event(i)
        per.setdefault((u, r), []).append((i, c, a))
    ents: dict[str, list] = {"summary": [], "recent": [], "per_category": []}
    for (u, r), evs in sorted(per.items()):
        key = {"type": "row", "kind": "+I", "fields": [u, r]}
        cats: list[str] = []
        counts: dict[str, int] = {}
        for idx, (i, c, a) in enumerate(evs):
            if c not in cats:
                cats.append(c)
            counts[c] = counts.get(c, 0) + 1
            ents["recent"].append({"key": key, "namespace": None, "user_key": idx,
                                   "value": {"type": "tuple", "fields": [i, c, a / 2]}})
        ents["summary"].append({"key": key, "namespace": None, "user_key": None, "value": {
            "type": "map", "entries": sorted([["cats", cats], ["count", len(evs)], ["total", sum(a for _, _, a in evs)]])}})
        for c, n in sorted(counts.items()):
            ents["per_category"].append({"key": key, "namespace": None, "user_key": c, "value": n})
    kinds = {"summary": ("value", "pickled dict (Types.PICKLED_BYTE_ARRAY)"),
             "recent": ("list", "pickled tuple (int, str, float)"), "per_category": ("map", "Map<String, Long>")}
    return {"generator": "tools/flink/pyflink_job.py", "name": name, "job": "pyflink", "backend": "hashmap",
            "kind": "canonical-savepoint", "parallelism": 2, "max_parallelism": 128, "events": EVENTS,
            "uids": ["py-track"], "operator_match": "uid",
            # what the job declared that the snapshot does not store: handed to explorer.open by the checks
            "open_options": {"pyflink_kinds": {s: k for s, (k, _) in kinds.items() if s != "per_category"}},
            "operators": {"py-track": {"name": "py-track", "states": {
                s: {"kind": kinds[s][0], "type": kinds[s][1], "entries": e} for s, e in ents.items()}}}}


def main() -> int:
    out_root, name = Path(sys.argv[1]), sys.argv[2]
    work = Path(tempfile.mkdtemp(prefix=f"flink-fixture-{name}"))
    conf = Configuration()
    for k, v in {"$internal.pipeline.job-id": JOB_ID, "state.backend.type": "hashmap", "rest.bind-port": "0",
                 "pipeline.max-parallelism": "128", "taskmanager.numberOfTaskSlots": "4",
                 "execution.checkpointing.savepoint-dir": work.joinpath("savepoints").as_uri(),
                 # the Python workers must run this venv's interpreter, not whatever python is on PATH
                 "python.executable": sys.executable, "python.client.executable": sys.executable}.items():
        conf.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_max_parallelism(128)
    row_t = Types.ROW_NAMED(["user", "region", "category", "amount", "seq"],
                            [Types.STRING(), Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG()])
    src = env.from_source(NumberSequenceSource(0, 2**62), WatermarkStrategy.no_watermarks(), "sequence")
    events = src.set_parallelism(1).flat_map(gen, output_type=row_t).set_parallelism(1).uid("py-events")
    key_t = Types.ROW_NAMED(["user", "region"], [Types.STRING(), Types.STRING()])
    events.key_by(lambda r: Row(user=r[0], region=r[1]), key_type=key_t).process(Track()).uid("py-track").name("py-track")
    client = env.execute_async(f"fixture-{name}")
    time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 25)
    status = client.get_job_status().result()
    if status.name != "RUNNING":
        print("job is", status, file=sys.stderr)
        client.get_job_execution_result().result()  # raises the job's failure
    # PyFlink 2.3's JobClient.trigger_savepoint calls a Java method that no longer exists: call Java's directly
    from pyflink.java_gateway import get_gateway

    fmt = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    sp = client._j_job_client.triggerSavepoint(work.joinpath("savepoints").as_uri(), fmt).get()
    client.cancel().result()
    dest = out_root / name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.move(urlparse(sp).path, dest)
    e = expected(name)
    import pyflink
    e["flink_version"] = getattr(pyflink, "__version__", None) or _version()
    (dest / "EXPECTED.json").write_text(json.dumps(e, indent=1, ensure_ascii=True) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print("wrote", dest)
    return 0


def _version() -> str:
    from importlib.metadata import version

    return version("apache-flink")


if __name__ == "__main__":
    raise SystemExit(main())
