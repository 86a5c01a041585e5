"""The columnar fast path of the built-in keyed count: same outputs, same state, same snapshots.

The fast path (a :class:`ColumnSource`, hash routing on factorised key columns,
the heap backend's :class:`ColumnarValueTable`) must be the same engine as the
generic path (records as Python objects, the ordinary state table through
``get_many``/``put_many``): identical rolling outputs, identical live state,
identical savepoint files, restorable and rescalable on heap and RocksDB, and
exactly-once across a crash.
"""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from explorer.engine import CollectSink, KeyedProcessFunction, StreamEnvironment, ValueStateDescriptor
from explorer.engine.backends.heap import ColumnarValueTable, HeapStateTable
from explorer.engine.channels import ColumnBatch
from explorer.engine.checkpoint.job import CRASH_POINTS, CrashInjector, run_with_recovery
from explorer.engine.metrics import SpaceSaving
from explorer.engine.routing import factorize_column, factorize_keys
from explorer.engine.sources import ColumnSource
from explorer.engine.state import ValueStateDescriptor as VSD
from explorer.errors import JobError, KeyTypeError, StateError
from explorer.format.snapshot import read_metadata
from explorer.keygroups import KeyGroupRange, assign_to_key_group


def planted(n: int = 6000, seed: int = 5) -> list[tuple[str, int]]:
    """Zipf-skewed keys, three planted hot keys, non-ASCII names, keys that first appear late."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.3, n) % 400
    hot = rng.random(n) < 0.1
    ranks[hot] = 400 + rng.integers(0, 3, int(hot.sum()))
    names = [f"user-{r}" if r % 7 else f"ünï-{r}-😀" for r in range(403)]
    out = [(names[r], i) for i, r in enumerate(ranks.tolist())]
    out[n // 2:n // 2 + 5] = [(f"late-{j}", n // 2 + j) for j in range(5)]
    return out


DATA = planted()
COLUMNS = {"user": [k for k, _ in DATA], "i": np.array([i for _, i in DATA], dtype=np.int64)}


def make_env(*, source="list", columnar_state=True, backend="heap", parallelism=1, sink=None, emit=True,
             chk=None, every=700, unaligned=False):
    env = StreamEnvironment(parallelism=parallelism, max_parallelism=128, state_backend=backend, batch_size=97,
                            columnar_state=columnar_state)
    if chk is not None:
        env.enable_checkpointing(chk, interval_records=every, retained=2, asynchronous=False, unaligned=unaligned)
    if source == "list":
        stream = env.from_collection(DATA, name="src", num_splits=2, parallelism=2)
    else:
        stream = env.from_columns(COLUMNS, name="src", num_splits=2, parallelism=2)
    counted = stream.key_by(0 if source != "named" else "user").count(name="count", uid="count",
                                                                      emit_every_record=emit)
    if emit:
        counted.sink_to(sink or CollectSink("out"), name="sink")
    return env


VARIANTS = [("list", False), ("list", True), ("columns", True), ("named", True), ("columns", False)]


def expected_outputs() -> Counter:
    d: dict[str, int] = {}
    out = []
    for k, _ in DATA:
        d[k] = d.get(k, 0) + 1
        out.append((k, d[k]))
    return Counter(out)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("parallelism", [1, 3])
def test_every_path_emits_the_same_rolling_counts_in_the_same_order(backend, parallelism):
    outputs = {}
    for source, columnar in VARIANTS:
        sink = CollectSink("out")
        make_env(source=source, columnar_state=columnar, backend=backend, parallelism=parallelism,
                 sink=sink).execute("job")
        outputs[(source, columnar)] = list(sink.results)
    reference = outputs[("list", False)]
    assert Counter(reference) == expected_outputs()
    assert all(type(k) is str and type(c) is int for k, c in reference)
    for variant, got in outputs.items():
        assert got == reference, variant


def live_state(result):
    df = result.state("count")
    return list(df[["key", "key_group", "subtask", "value"]].itertuples(index=False, name=None))


@pytest.mark.parametrize("parallelism", [1, 2])
def test_live_state_metrics_and_heavy_hitters_are_the_same(parallelism):
    results = {v: make_env(source=v[0], columnar_state=v[1], parallelism=parallelism, emit=False).execute("job")
               for v in VARIANTS}
    ref = results[("list", False)]
    truth = Counter(k for k, _ in DATA)
    assert sorted((k, v) for k, _, _, v in live_state(ref)) == sorted(truth.items())
    for k, kg, _, _ in live_state(ref):
        assert assign_to_key_group(k, 128) == kg
    for variant, res in results.items():
        assert live_state(res) == live_state(ref), variant  # same rows in the same (key-group, insertion) order
        pd.testing.assert_frame_equal(res.key_group_metrics("count"), ref.key_group_metrics("count"))
        pd.testing.assert_frame_equal(res.heavy_hitters("count", 20), ref.heavy_hitters("count", 20))
    table = results[("columns", True)].runtime.subtasks_of("count")[0].operator.backend.tables["count"]
    assert isinstance(table, ColumnarValueTable)
    generic = results[("list", False)].runtime.subtasks_of("count")[0].operator.backend.tables["count"]
    assert isinstance(generic, HeapStateTable)


def savepoint_midway(root: Path, **kw) -> Path:
    client = make_env(**kw).execute_async("job")
    client.run(until=lambda rt: sum(s.operator.records_in for s in rt.subtasks if s.is_source) >= len(DATA) // 2)
    return client.stop_with_savepoint(root)


def keyed_files(sp: Path) -> dict[str, pa.Table]:
    return {str(p.relative_to(sp)): pq.read_table(p) for p in sorted((sp / "keyed").rglob("*.parquet"))}


def comparable(meta: dict) -> list:
    """What a savepoint says about its operators, without ids, times, sizes, file names and the backend."""
    out = []
    for op in meta["operators"]:
        for sub in op["subtasks"]:
            out.append((op["uid"], sub.get("key_group_range"), sub.get("source_positions"),
                        sub.get("records_per_key_group"), sub.get("heavy_hitters"),
                        [(s["name"], s["rows"]) for s in sub.get("states", [])]))
    return out


@pytest.mark.parametrize("parallelism", [1, 2])
def test_savepoints_of_every_heap_path_hold_identical_files(tmp_path, parallelism):
    sps = {v: savepoint_midway(tmp_path / f"sp-{v[0]}-{v[1]}", source=v[0], columnar_state=v[1],
                               parallelism=parallelism) for v in VARIANTS}
    ref_files = keyed_files(sps[("list", False)])
    assert ref_files and sum(t.num_rows for t in ref_files.values()) > 100
    ref_meta = comparable(read_metadata(sps[("list", False)]))
    for variant, sp in sps.items():
        files = keyed_files(sp)
        assert files.keys() == ref_files.keys(), variant
        for name, table in files.items():
            assert table.equals(ref_files[name]), (variant, name)
        assert comparable(read_metadata(sp)) == ref_meta, variant


def test_rocksdb_savepoints_hold_the_same_entries(tmp_path):
    heap = savepoint_midway(tmp_path / "heap", source="columns")
    rocks = savepoint_midway(tmp_path / "rocks", source="columns", backend="rocksdb")
    rows = lambda sp: sorted(  # noqa: E731
        tuple(r.values()) for t in keyed_files(sp).values() for r in t.select(["key_group", "key", "value"]).to_pylist())
    assert rows(heap) == rows(rocks) and len(rows(heap)) > 100


@pytest.mark.parametrize("restore_backend,restore_columnar", [("heap", True), ("heap", False), ("rocksdb", True)])
@pytest.mark.parametrize("new_parallelism", [1, 3])
def test_a_columnar_savepoint_restores_and_rescales_exactly(tmp_path, restore_backend, restore_columnar,
                                                             new_parallelism):
    first = CollectSink("first")
    sp = savepoint_midway(tmp_path / "sp", source="columns", parallelism=2, sink=first)
    rest = CollectSink("rest")
    res = make_env(source="columns", columnar_state=restore_columnar, backend=restore_backend,
                   parallelism=new_parallelism, sink=rest).execute("job", restore_from=sp)
    assert Counter(first.results + rest.results) == expected_outputs()
    assert sorted((k, v) for k, _, _, v in live_state(res)) == sorted(Counter(k for k, _ in DATA).items())


def test_a_generic_savepoint_restores_into_the_columnar_table(tmp_path):
    first = CollectSink("first")
    sp = savepoint_midway(tmp_path / "sp", source="list", columnar_state=False, backend="rocksdb", sink=first)
    rest = CollectSink("rest")
    env = make_env(source="columns", parallelism=2, sink=rest)
    client = env.execute_async("job", restore_from=sp)
    tables = [st.operator.backend.tables["count"] for st in client.runtime.subtasks_of("count")]
    assert all(isinstance(t, ColumnarValueTable) for t in tables) and sum(len(t) for t in tables) > 0
    client.run()
    client.close()
    assert Counter(first.results + rest.results) == expected_outputs()


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_columnar_count_recovers_exactly_once_after_a_crash(tmp_path, point):
    sink = CollectSink("out")
    _, restarts = run_with_recovery(lambda: make_env(source="columns", parallelism=2, sink=sink, chk=tmp_path / "chk"),
                                    "job", CrashInjector(point, 2))
    assert restarts == 1
    assert Counter(sink.results) == expected_outputs()


def test_unaligned_checkpoints_store_columnar_batches_in_flight_and_recover_exactly_once(tmp_path):
    sink = CollectSink("out")
    result, restarts = run_with_recovery(
        lambda: make_env(source="columns", parallelism=2, sink=sink, chk=tmp_path / "chk", every=300, unaligned=True),
        "job", CrashInjector("round", 30))
    assert restarts == 1
    assert Counter(sink.results) == expected_outputs()
    stored = [json.loads(f.read_text()).get("inflight") for f in (tmp_path / "chk").rglob("operator/*/*.json")]
    assert sum(len(b["values"]) for inflight in stored if inflight for b in inflight) > 0  # batches were in flight


def test_columnar_table_orders_rows_like_the_heap_table():
    rng = np.random.default_rng(3)
    kgr = KeyGroupRange(0, 15)
    desc = VSD("count", int)
    heap, col = HeapStateTable(desc, kgr), ColumnarValueTable(desc, kgr, np.int64)
    keys = [f"k{i}" for i in range(60)]
    for _ in range(3000):
        k = keys[int(rng.integers(0, 60))]
        kg = assign_to_key_group(k, 16)
        op = rng.random()
        if op < 0.15:
            heap.remove(kg, k, None)
            col.remove(kg, k, None)
        elif op < 0.6:
            v = int(rng.integers(0, 1000))
            heap.put(kg, k, None, v)
            col.put(kg, k, None, v)
        else:
            assert heap.get(kg, k, None) == col.get(kg, k, None)
    assert list(col.rows()) == list(heap.rows())
    assert list(col.addresses(KeyGroupRange(3, 9))) == list(heap.addresses(KeyGroupRange(3, 9)))
    assert col.entries_per_key_group() == heap.entries_per_key_group() and len(col) == len(heap)
    assert all(type(r[4]) is int for r in col.rows())
    with pytest.raises(StateError, match="default namespace"):
        col.put(0, "k1", "window-1", 3)


def test_update_counts_builds_the_same_sketch_as_update_many():
    rng = np.random.default_rng(1)
    a, b = SpaceSaving(16), SpaceSaving(16)
    for _ in range(30):
        n = int(rng.integers(1, 200))
        keys = [f"k{int(x)}" for x in rng.choice(500, n, replace=False)]
        weights = rng.integers(1, 6, n)  # many ties at the cut
        a.update_many(zip(keys, weights.tolist()))
        b.update_counts(keys, weights)
        assert a.counts == b.counts and a.errors == b.errors and a.total == b.total


def test_factorizing_keeps_first_appearance_order_and_rejects_null_keys():
    codes, uniques = factorize_keys([("a", 1), ("b", 2), ("a", 1)])
    assert uniques == [("a", 1), ("b", 2)] and codes.tolist() == [0, 1, 0]
    codes, uniques = factorize_column(pa.array(["x", "y", "x", "z"]))
    assert uniques == ["x", "y", "z"] and codes.tolist() == [0, 1, 0, 2]
    codes, uniques = factorize_column(np.array([7, -3, 7]))
    assert uniques == [7, -3] and type(uniques[0]) is int
    with pytest.raises(KeyTypeError, match="null"):
        factorize_keys(["a", None])
    with pytest.raises(KeyTypeError, match="null"):
        factorize_column(pa.array(["a", None]))
    with pytest.raises(KeyTypeError, match="not hashable"):
        factorize_keys([["a"], ["b"]])


class Echo(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", int))

    def process_element(self, value, ctx, out):
        self.n.update(self.n.value(0) + 1)
        out.collect((value, ctx.get_current_key(), self.n.value()))


@pytest.mark.parametrize("data", [
    pa.table({"user": [k for k, _ in DATA[:500]], "i": [i for _, i in DATA[:500]]}),
    pd.DataFrame({"user": [k for k, _ in DATA[:500]], "i": [i for _, i in DATA[:500]]}),
    {"user": [k for k, _ in DATA[:500]], "i": list(range(500))},
])
def test_column_sources_look_like_the_same_tuples_to_every_other_operator(data):
    def run(from_columns):
        env = StreamEnvironment(parallelism=2, batch_size=64)
        src = env.from_columns(data) if from_columns else env.from_collection(DATA[:500])
        src.key_by(0).process(Echo(), name="echo").collect("echo")
        src.map(lambda r: (r[0].upper(), r[1] * 2)).key_by(0).sum(1, name="sum").collect("sum")
        src.filter(lambda r: r[1] % 3 == 0).key_by(0).reduce(
            lambda a, b: a + b, int, field=1, name="reduce").collect("reduce")
        counted = src.key_by(0).count(name="count")  # columnar output batches, keyed again by their key column
        counted.key_by(0).process(Echo(), name="echo-counts").collect("counts")
        counted.key_by(lambda r: r[1] % 5).count(name="by-count").collect("by-count")
        res = env.execute("job")
        return {name: res.output(name) for name in ("echo", "sum", "reduce", "counts", "by-count")}

    got, want = run(True), run(False)
    assert got == want and len(got["echo"]) == 500
    assert all(type(v) is tuple and type(v[0]) is str and type(v[1]) is int for v, _, _ in got["echo"])


def test_column_source_errors_name_what_was_found():
    with pytest.raises(JobError, match="different lengths"):
        ColumnSource({"a": [1, 2], "b": [1]})
    with pytest.raises(JobError, match="expected a pyarrow Table"):
        ColumnSource([("a", 1)])
    with pytest.raises(JobError, match="no column named 'nope'"):
        ColumnSource({"a": [1]}).column_index("nope")
    with pytest.raises(JobError, match="nulls"):
        ColumnSource(pa.table({"a": pa.array([1, None])}))


def test_column_batches_materialise_records_once_and_only_when_read():
    b = ColumnBatch([pa.array(["a", "b"]), np.array([1, 2])], 2, ["k", "v"])
    assert b._values is None and len(b) == 2
    assert b.values == [("a", 1), ("b", 2)] and b.values is b.values


def test_a_dictionary_column_is_used_as_given_unless_its_values_repeat():
    keys = [k for k, _ in DATA[:300]]
    plain = pa.array(keys)
    given = plain.dictionary_encode()
    repeating = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1, 0], pa.int32()), pa.array(["a", "b", "a"]))
    for col in (plain, given):
        src = ColumnSource({"user": col})
        assert src.read("0", 0, 300)[0].values == [(k,) for k in keys]
    env = StreamEnvironment(batch_size=2)
    env.from_columns({"user": repeating}).key_by(0).count().collect("out")
    assert env.execute("job").output("out") == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]


def test_string_hash_codes_agree_with_the_scalar_hash_with_and_without_astral_characters():
    from explorer.keygroups import java_hash_code, java_string_hash_codes

    for strings in (["abc", "", "ünï"], ["a😀b", "", "x", "😀😀"]):
        got = java_string_hash_codes(strings).tolist()
        assert got == [java_hash_code(s) & 0xFFFFFFFF for s in strings]


@pytest.mark.parametrize("intern_size", [5, 1 << 20])
def test_hash_edges_code_keys_consistently_even_when_their_dictionary_starts_afresh(intern_size):
    import operator

    from explorer.engine.channels import Batch, Channel
    from explorer.engine.routing import KeyGroupPartitioner

    part = KeyGroupPartitioner(operator.itemgetter(0), 128, 3)
    part.intern_size = intern_size
    chans = [Channel("src[0]", f"count[{i}]") for i in range(3)]
    seen = 0
    for lo in range(0, 600, 50):
        for ch, b in part.route(Batch(DATA[lo:lo + 50]), chans, 0):
            seen += len(b)
            owner = chans.index(ch)
            assert b.keys == [b.uniques[c] for c in b.codes.tolist()]
            assert [b.dictionary.values[c] for c in b.ucodes.tolist()] == list(b.uniques)
            assert b.key_groups.tolist() == [assign_to_key_group(k, 128) for k in b.keys]
            assert b.ukgs.tolist() == [assign_to_key_group(k, 128) for k in b.uniques]
            assert all(kg * 3 // 128 == owner for kg in b.key_groups.tolist())
    assert seen == 600


def test_a_hash_edge_hands_on_its_own_copy_of_each_string_key_and_other_keys_as_given():
    import operator

    from explorer.engine.channels import Batch, Channel
    from explorer.engine.routing import KeyGroupPartitioner

    part = KeyGroupPartitioner(operator.itemgetter(0), 128, 1)
    chans = [Channel("src[0]", "op[0]")]
    first = [("".join(["user-", str(i % 7)]), i) for i in range(20)]
    again = [("".join(["user-", str(i % 9)]), i) for i in range(20)]  # equal keys, other objects
    (_, b1), = part.route(Batch(first), chans, 0)
    (_, b2), = part.route(Batch(again), chans, 0)
    copies = {id(k): k for k in b1.uniques}
    assert b1.uniques == [f"user-{i}" for i in range(7)] and b2.uniques == [f"user-{i}" for i in range(9)]
    assert not any(k is r[0] for k in b1.uniques for r in first)  # the dictionary's own objects
    assert all(id(k) in copies for k in b2.uniques[:7])  # the same object for the same key in every batch
    assert b2.keys == [r[0] for r in again]  # the records' own keys stay as they came
    mixed = KeyGroupPartitioner(operator.itemgetter(0), 128, 1)
    recs = [(1, 0), ("a", 1), ((2, 3), 2)]
    (_, b3), = mixed.route(Batch(recs), chans, 0)
    assert b3.uniques == [1, "a", (2, 3)] and all(u is r[0] for u, r in zip(b3.uniques, recs))
