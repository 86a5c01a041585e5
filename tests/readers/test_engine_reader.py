"""explorer.open on the engine's own snapshots: the contract columns, push-down, errors."""

from dataclasses import dataclass

import pandas as pd
import pytest

import explorer
from explorer.engine import (
    KeyedProcessFunction,
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    StateTtlConfig,
    StreamEnvironment,
    ValueStateDescriptor,
)
from explorer.errors import SnapshotNotFoundError
from explorer.keygroups import assign_to_key_group, operator_index_for_key_group

T0 = 1_700_000_000_000
TTL = 3_600_000


@dataclass
class Visit:
    page: str
    ms: int


class Profile(KeyedProcessFunction):
    def open(self, ctx):
        self.visits = ctx.get_state(ValueStateDescriptor("visits", int, ttl=StateTtlConfig(TTL)))
        self.pages = ctx.get_state(ListStateDescriptor("pages", Visit))
        self.by_page = ctx.get_state(MapStateDescriptor("by_page", str, int))

    def process_element(self, value, ctx, out):
        key, page, ms = value
        self.visits.update(self.visits.value(0) + 1)
        self.pages.add(Visit(page, ms))
        self.by_page[page] = self.by_page.get(page, 0) + 1
        ctx.timer_service().register_event_time_timer(10**15 + ms)  # never fires before the savepoint


RECORDS = [(f"u{i % 13}", f"/p{i % 4}", i) for i in range(200)]


@pytest.fixture(params=["heap", "rocksdb"])
def savepoint(request, tmp_path):
    env = StreamEnvironment(parallelism=3, max_parallelism=64, clock=ManualClock(T0), state_backend=request.param)
    env.from_collection(RECORDS, name="src").key_by(0).process(Profile(), name="profile")
    client = env.execute_async("job")
    client.runtime.hold_sources_open = True
    client.run(until=lambda rt: all(s.operator.exhausted for s in rt.subtasks if s.is_source))
    client.run(max_rounds=20)
    return client.stop_with_savepoint(tmp_path / "sp")


def test_open_reads_metadata_and_the_contract_frame(savepoint):
    snap = explorer.open(savepoint)
    assert snap.kind == "savepoint" and snap.format == "engine-savepoint"
    assert set(snap.states["state"]) == {"visits", "pages", "by_page"}
    df = snap.keyed_state()
    assert list(df.columns) == list(explorer.CONTRACT_COLUMNS)
    assert str(df["last_access"].dtype) == "datetime64[ms, UTC]"
    counts = df.groupby("state").size().to_dict()
    assert counts["visits"] == 13 and counts["pages"] == 200 and counts["by_page"] == 13 * 4
    assert counts["event_timers"] == 200
    # every row's key group and subtask are Flink's for that key
    for key, kg, sub in df[["key", "key_group", "subtask"]].drop_duplicates().itertuples(index=False):
        assert kg == assign_to_key_group(key, 64)
        assert sub == operator_index_for_key_group(64, 3, kg)


def test_values_come_back_typed_with_ttl_times(savepoint):
    df = explorer.open(savepoint).keyed_state(state="visits")
    assert df.set_index("key")["value"].to_dict() == {f"u{i}": sum(1 for r in RECORDS if r[0] == f"u{i}") for i in range(13)}
    assert (df["last_access"] == pd.Timestamp(T0, unit="ms", tz="UTC")).all()
    assert (df["expires_at"] - df["last_access"] == pd.Timedelta(milliseconds=TTL)).all()
    pages = explorer.open(savepoint).keyed_state(state="pages", key="u3")
    assert sorted(v["ms"] for v in pages["value"]) == [r[2] for r in RECORDS if r[0] == "u3"]
    assert sorted(pages["user_key"]) == list(range(len(pages)))  # list positions
    assert pages["expires_at"].isna().all()  # no TTL on this state


def test_filters_are_pushed_down(savepoint):
    snap = explorer.open(savepoint)
    kg = assign_to_key_group("u5", 64)
    part = snap.keyed_state(key_groups=[kg], state="by_page")
    assert set(part["key_group"]) == {kg}
    assert "u5" in set(part["key"])
    cols = snap.keyed_state(state="visits", columns=["key", "value"])
    assert list(cols.columns) == ["key", "value"]
    assert snap.keyed_state(operator="nope").empty


def test_sizes_are_the_serialized_sizes(savepoint):
    df = explorer.open(savepoint).keyed_state(state="by_page")
    assert (df["size_bytes"] == 8).all()  # one int64 per map value
    pages = explorer.open(savepoint).keyed_state(state="pages")
    expected = pages["value"].map(lambda v: len(v["page"]) + 1 + 8)
    assert (pages["size_bytes"] == expected).all()


def test_a_checkpoint_directory_opens_its_newest_checkpoint(tmp_path):
    env = StreamEnvironment(parallelism=2, clock=ManualClock(T0))
    env.enable_checkpointing(tmp_path / "chk", interval_records=50, retained=5, asynchronous=False)
    env.from_collection(RECORDS, name="src").key_by(0).process(Profile(), name="profile")
    env.execute("job")
    snap = explorer.open(tmp_path / "chk")
    ids = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "chk").glob("chk-*"))
    assert snap.checkpoint_id == ids[-1] and snap.kind == "checkpoint"


def test_unknown_paths_get_a_clear_error(tmp_path):
    with pytest.raises(SnapshotNotFoundError, match="no such file or directory"):
        explorer.open(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SnapshotNotFoundError, match=r"found \['notes.txt'\].*expected an engine checkpoint"):
        explorer.open(tmp_path)


class ByTuple(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", int))

    def process_element(self, value, ctx, out):
        self.n.update(self.n.value(0) + 1)


def test_tuple_keys_come_back_as_tuples_and_analyses_work(tmp_path):
    records = [((f"k{i % 5}", i % 3), i) for i in range(300)]
    env = StreamEnvironment(parallelism=2, max_parallelism=64)
    env.from_collection(records, name="src").key_by(0).process(ByTuple(), name="pairs")
    client = env.execute_async("job")
    client.run()
    sp = client.trigger_savepoint(tmp_path / "sp")
    client.close()
    snap = explorer.open(sp)
    df = snap.keyed_state(state="n")
    assert sorted(df["key"]) == sorted({k for k, _ in records})
    assert all(isinstance(k, tuple) for k in df["key"])
    for key, kg in df[["key", "key_group"]].itertuples(index=False):
        assert kg == assign_to_key_group(key, 64)
    top = snap.hot_keys(3, by="entries")
    assert len(top) == 3


def test_the_reader_reads_only_the_columns_asked(tmp_path):
    """A query's columns are what its pieces hold: the values are read for sizes only when asked, and
    the one-value columns come by value."""
    from explorer.readers.base import KeyedStateQuery, piece_value

    snap = explorer.open("sample_data/fraud/savepoint-heap")
    full = list(snap.reader.keyed_pieces(KeyedStateQuery()))
    light = list(snap.reader.keyed_pieces(KeyedStateQuery(columns=("key", "key_group", "size_bytes"))))
    assert len(full) == len(light)
    for f, p in zip(full, light):
        assert p.column_names == ["key", "key_group", "size_bytes"]
        assert p.column("size_bytes").equals(f.column("size_bytes"))
        assert piece_value(p, "state") == f.column("state")[0].as_py()


def test_a_state_file_without_an_asked_column_is_reported_not_read_as_nulls(tmp_path):
    import shutil

    import pyarrow.parquet as pq

    from explorer.errors import SnapshotCorruptError
    from explorer.format.snapshot import file_entry, read_metadata, write_metadata

    folder = tmp_path / "sp"
    shutil.copytree("sample_data/fraud/savepoint-heap", folder)
    meta = read_metadata(folder)
    rel = next(r for r in sorted(meta["files"]) if r.startswith("keyed/") and r.endswith(".parquet"))
    pq.write_table(pq.read_table(folder / rel).drop_columns(["value"]), folder / rel)
    meta["files"][rel] = file_entry(folder, folder / rel)
    write_metadata(folder, meta)
    snap = explorer.open(folder)
    with pytest.raises(SnapshotCorruptError, match="without the columns"):
        snap.key_group_distribution()
