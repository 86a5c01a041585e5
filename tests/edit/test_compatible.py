"""explorer.compatible: its verdicts match what the engine's restore does, and Flink fixture pairs read sensibly.

Version 1 of a job keeps a dataclass per key; each new version is run briefly to take the "new" savepoint
compatible() compares with, then restored from version 1's savepoint: it succeeds exactly when
compatible() says "restores as is" or "needs migration".
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import explorer
from explorer.compatibility import AS_IS, FAIL, MIGRATION
from explorer.engine import KeyedProcessFunction, StateTtlConfig, StreamEnvironment, ValueStateDescriptor
from explorer.errors import RestoreError, StateExplorerError
from explorer.pipelines._common import as_source

RECORDS = [{"k": f"k{i % 7}", "n": i} for i in range(200)]


@dataclass
class Acc:
    count: int


@dataclass
class AccWithTotal:  # version 2: a field added with a default (the engine's schema evolution)
    count: int
    total: int = 0


def job(descriptor, records=RECORDS, uid="acc", max_parallelism=128):
    make = descriptor.type

    class Fn(KeyedProcessFunction):
        def open(self, ctx):
            self.acc = ctx.get_state(descriptor)

        def process_element(self, r, ctx, out):
            v = self.acc.value()
            if v is None:
                v = make(0) if make in (Acc, AccWithTotal) else (0 if make is int else "0")
            v = type(v)(v.count + 1) if hasattr(v, "count") else v
            self.acc.update(v)

    env = StreamEnvironment(parallelism=2, max_parallelism=max_parallelism)
    env.from_source(as_source(records, 1), name="src", uid="src").key_by("k").process(Fn(), name=uid, uid=uid).collect("out")
    return env


def savepoint(env, target):
    client = env.execute_async("j")
    client.run(max_rounds=2)
    return client.stop_with_savepoint(target)


def restores(env, sp) -> bool:
    try:
        client = env.execute_async("j", restore_from=sp)
    except RestoreError:
        return False
    client.close()
    return True


VERSIONS = {
    "same": (lambda: ValueStateDescriptor("acc", Acc), AS_IS),
    "field added": (lambda: ValueStateDescriptor("acc", AccWithTotal), MIGRATION),
    "type changed": (lambda: ValueStateDescriptor("acc", str), FAIL),
    "state renamed": (lambda: ValueStateDescriptor("acc-v2", Acc), FAIL),
    "ttl added": (lambda: ValueStateDescriptor("acc", Acc, ttl=StateTtlConfig(60_000)), FAIL),
}


@pytest.fixture(scope="module")
def v1(tmp_path_factory):
    return savepoint(job(ValueStateDescriptor("acc", Acc)), tmp_path_factory.mktemp("v1") / "sp")


@pytest.mark.parametrize("version", list(VERSIONS))
def test_verdict_matches_the_engine_restore(v1, tmp_path, version):
    make, want = VERSIONS[version]
    new_sp = savepoint(job(make(), records=[]), tmp_path / "new")
    report = explorer.compatible(v1, new_sp)
    row = report[(report.operator == "acc") & (report.state == "acc")].iloc[0]
    assert row.verdict == want, row.reason
    assert row.reason
    assert restores(job(make(), records=[]), v1) == (want != FAIL)


def test_missing_uid_and_max_parallelism(v1, tmp_path):
    renamed = savepoint(job(ValueStateDescriptor("acc", Acc), records=[], uid="acc-v2"), tmp_path / "a")
    report = explorer.compatible(v1, renamed)
    row = report[(report.operator == "acc") & report.state.isna()].iloc[0]
    assert row.verdict == FAIL and "allow_non_restored_state" in row.reason
    assert not restores(job(ValueStateDescriptor("acc", Acc), records=[], uid="acc-v2"), v1)

    wider = savepoint(job(ValueStateDescriptor("acc", Acc), records=[], max_parallelism=256), tmp_path / "b")
    row = explorer.compatible(v1, wider).iloc[0]
    assert row.verdict == FAIL and "max parallelism" in row.reason
    assert not restores(job(ValueStateDescriptor("acc", Acc), records=[], max_parallelism=256), v1)
    # the edit the reason names makes it restore
    fixed = explorer.edit(v1).with_max_parallelism(256).write(tmp_path / "fixed")
    assert FAIL not in set(explorer.compatible(fixed, wider).verdict)
    assert restores(job(ValueStateDescriptor("acc", Acc), records=[], max_parallelism=256), fixed)


FLINK = "sample_data/flink/production/"


def test_flink_same_states_two_backends_restore_as_is():
    report = explorer.compatible(FLINK + "plain-rocksdb-canonical-savepoint", FLINK + "plain-rocksdb-incremental-checkpoint")
    states = report[report.state.notna()]
    assert len(states) >= 5 and set(states.verdict) == {AS_IS}
    # that job's source has another uid ("events-source", was "sequence"): its operator state is not restored
    fails = report[report.verdict == FAIL]
    assert list(fails.operator) == ["sequence"] and "allowNonRestoredState" in fails.iloc[0].reason


def test_flink_1_17_to_2_3_types_job():
    report = explorer.compatible(FLINK + "flink-1.17-types-heap-canonical-savepoint",
                                 FLINK + "types-heap-canonical-savepoint")
    fails = report[report.verdict == FAIL]
    # the source got another uid; Kryo 2 values (Flink 1.x) are not Flink 2's Kryo 5 or its List serializer
    assert any(r.state is None and "allowNonRestoredState" in r.reason for r in fails.itertuples())
    assert any("Kryo 2" in r.reason for r in fails.itertuples())


def test_mixed_kinds_refused(v1):
    with pytest.raises(StateExplorerError, match="expected two of the same kind"):
        explorer.compatible(v1, FLINK + "plain-rocksdb-canonical-savepoint")


# -- Avro schema changes: Avro's reader/writer resolution (what Flink's AvroSerializerSnapshot checks) ---------
_USER = {"type": "record", "name": "User", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "visits", "type": "int"},
    {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["BRONZE", "GOLD"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def _with(**changes):
    import copy
    schema = copy.deepcopy(_USER)
    fields = {f["name"]: f for f in schema["fields"]}
    for name, field in changes.items():
        if field is None:
            schema["fields"].remove(fields[name])
        elif name in fields:
            fields[name].update(field)
        else:
            schema["fields"].append({"name": name, **field})
    return schema


AVRO_CASES = {  # the new (reader) schema, given the old (writer) _USER: the verdict
    "the same": (_USER, AS_IS),
    "field added with a default": (_with(score={"type": "long", "default": 0}), MIGRATION),
    "field removed": (_with(tags=None), MIGRATION),
    "int promoted to long": (_with(visits={"type": "long"}), MIGRATION),
    "int promoted to double": (_with(visits={"type": "double"}), MIGRATION),
    "string read as bytes": (_with(id={"type": "bytes"}), MIGRATION),
    "enum symbol added": (_with(tier={"type": {"type": "enum", "name": "Tier", "symbols": ["BRONZE", "SILVER", "GOLD"]}}),
                          MIGRATION),
    "a type widened into a union": (_with(visits={"type": ["null", "int"]}), MIGRATION),
    "a field renamed with an alias": (_with(visits=None, count={"type": "int", "aliases": ["visits"]}), MIGRATION),
    "field added without a default": (_with(score={"type": "long"}), FAIL),
    "long narrowed to int": (_with(visits={"type": "long"}), "reverse"),
    "incompatible type": (_with(visits={"type": "string"}), FAIL),
    "enum symbol removed": (_with(tier={"type": {"type": "enum", "name": "Tier", "symbols": ["GOLD"]}}), FAIL),
    "union branch the reader lacks": (_with(note={"type": "string", "default": ""}), FAIL),
    "record renamed": ({**_USER, "name": "Customer"}, FAIL),
}


@pytest.mark.parametrize("name", list(AVRO_CASES))
def test_flink_avro_schema_change_by_avros_resolution_rules(name):
    from explorer.compatibility import _flink_evolve
    from explorer.readers.flink.avro import AvroDecoder, AvroSchema

    new, want = AVRO_CASES[name]
    old = _USER
    if want == "reverse":  # written as long, read as int: not a promotion
        old, new, want = new, _USER, FAIL
    changes: list[str] = []
    problem = _flink_evolve(AvroDecoder(AvroSchema(old)), AvroDecoder(AvroSchema(new)), "value", changes)
    got = FAIL if problem else MIGRATION if changes else AS_IS
    assert got == want, (problem, changes)
    if want == FAIL:
        assert "cannot read the old one" in problem
    if name == "field added without a default":
        assert "value.score" in problem and "without a default" in problem
    if name == "incompatible type":
        assert "value.visits: int cannot be read as string" in problem
