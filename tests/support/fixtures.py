"""Factory fixtures shared by the test suites (registered from ``tests/conftest.py``).

* ``clock``: a :class:`~explorer.engine.clock.ManualClock` (tests never sleep).
* ``make_backend(kind, ...)``: a keyed state backend of either kind; RocksDB
  instances live under ``tmp_path`` and every backend is closed at teardown.
* ``backend_kind``: ``"heap"`` and ``"rocksdb"``; a test that asks for it (or
  for ``backend``) runs once per backend.
* ``backend``: ``make_backend(backend_kind)`` with the default settings.
* ``keyed``: ``keyed(backend, key, namespace=None)`` sets the current key with
  its real (Flink) key group, as a keyed operator would.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable

import pytest

from explorer.engine.clock import ManualClock
from explorer.keygroups import KeyGroupRange, assign_to_key_group

BACKEND_KINDS = ["heap", "rocksdb"]
START_MS = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def make_backend(tmp_path: Path, clock: ManualClock) -> Callable[..., Any]:
    made = []
    counter = itertools.count()

    def make(kind: str, max_parallelism: int = 128, key_groups: KeyGroupRange | None = None,
             clock_: ManualClock | None = None, path: Path | None = None):
        kgr = key_groups or KeyGroupRange(0, max_parallelism - 1)
        c = clock_ or clock
        if kind == "heap":
            from explorer.engine.backends.heap import HeapStateBackend

            b = HeapStateBackend(max_parallelism, kgr, c)
        elif kind == "rocksdb":
            from explorer.engine.backends.rocksdb import RocksDBStateBackend

            b = RocksDBStateBackend(max_parallelism, kgr, c, path or tmp_path / f"rocksdb-{next(counter)}")
        else:  # pragma: no cover - a typo in a test
            raise ValueError(f"unknown backend kind {kind!r}; expected one of {BACKEND_KINDS}")
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


@pytest.fixture(params=BACKEND_KINDS)
def backend_kind(request) -> str:
    return request.param


@pytest.fixture
def backend(make_backend, backend_kind):
    return make_backend(backend_kind)


@pytest.fixture
def keyed() -> Callable[..., int]:
    def set_key(backend, key: Any, namespace: Any = None) -> int:
        kg = assign_to_key_group(key, backend.max_parallelism)
        backend.set_current_key(key, kg, namespace)
        return kg

    return set_key


# --- planted snapshots for the analysis, plot, report and CLI suites ---------------------
#
# Two small jobs run by the engine, once per backend and session (``tmp_path_factory``),
# whose answers are known from their input alone:
#
# * ``planted_job``: 200 ordinary keys with 5 records each and two hot keys with 50x the
#   traffic (250 records each, so lists 50x longer); parallelism 2, max parallelism 128;
#   a checkpoint after every 400 source records read into ``chk/``, then a savepoint ``sp/``.
# * ``planted_ttl``: one subtask (so records, and with them the manual clock, are processed
#   in input order); each record moves the clock to its timestamp and writes a value with a
#   1 h TTL, so every key's expiry is its last record's time + 1 h; background cleanup is off,
#   so expired values stay in the savepoint until read.

import dataclasses as _dc
import random as _random

PLANT_T0 = START_MS
PLANT_HOT_KEYS = ("hot-a", "hot-b")
PLANT_TTL_MS = 3_600_000
SNAPSHOT_BACKENDS = ["heap", "rocksdb"]


def planted_records(seed: int = 7) -> list[tuple[str, int, int]]:
    """``(key, timestamp_ms, item)``: 200 keys x 5 records, 2 hot keys x 250, shuffled, 5 s apart."""
    rng = _random.Random(seed)
    keys = [f"user-{i:03d}" for i in range(200) for _ in range(5)]
    keys += [k for k in PLANT_HOT_KEYS for _ in range(250)]
    rng.shuffle(keys)
    return [(k, PLANT_T0 + 5_000 * pos, pos) for pos, k in enumerate(keys)]


def _planted_function(clock_):
    from explorer.engine import (
        CleanupStrategies,
        KeyedProcessFunction,
        ListStateDescriptor,
        MapStateDescriptor,
        StateTtlConfig,
        ValueStateDescriptor,
    )

    class Planted(KeyedProcessFunction):
        clock = clock_  # a class attribute: the engine deep-copies instances, not classes

        def open(self, ctx):
            ttl = StateTtlConfig(PLANT_TTL_MS, cleanup=CleanupStrategies(in_background=False))
            self.last_seen = ctx.get_state(ValueStateDescriptor("last_seen", int, ttl=ttl))
            self.events = ctx.get_state(ListStateDescriptor("events", int))
            self.buckets = ctx.get_state(MapStateDescriptor("buckets", str, int))

        def process_element(self, value, ctx, out):
            key, ts, item = value
            if ts > self.clock.now_ms():
                self.clock.set(ts)
            self.last_seen.update(ts)
            self.events.add(item)
            b = f"b{item % 3}"
            self.buckets.put(b, self.buckets.get(b, 0) + 1)

    return Planted()


@_dc.dataclass(frozen=True)
class PlantedSnapshots:
    backend: str
    records: list
    savepoint: Path
    checkpoint_dir: Path
    parallelism: int
    max_parallelism: int


def run_planted(root: Path, backend: str, parallelism: int, checkpoint_every: int | None,
                 move_clock: bool) -> PlantedSnapshots:
    import explorer.engine as eng

    records = planted_records()
    clock_ = ManualClock(PLANT_T0)
    env = eng.StreamEnvironment(parallelism=parallelism, max_parallelism=128, clock=clock_, state_backend=backend,
                                state_dir=root / "work", batch_size=64)
    if checkpoint_every:  # checkpoints are triggered below; the interval only enables the directory
        env.enable_checkpointing(root / "chk", interval_records=10**9, retained=10)
    fn = _planted_function(clock_ if move_clock else ManualClock(0))
    strategy = eng.WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r[1])
    env.from_collection(records, strategy).key_by(0).process(fn, name="planted")
    client = env.execute_async("planted")
    if checkpoint_every:
        def read(rt):
            return sum(st.operator.records_in for st in rt.subtasks if st.is_source)

        for target in range(checkpoint_every, len(records), checkpoint_every):
            client.run(until=lambda rt, t=target: read(rt) >= t)
            client.trigger_checkpoint()
    client.run()
    sp = client.trigger_savepoint(root / "sp")
    client.close()
    return PlantedSnapshots(backend, records, sp, root / "chk", parallelism, 128)


@pytest.fixture(scope="session", params=SNAPSHOT_BACKENDS)
def snapshot_backend(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def planted_job(snapshot_backend, tmp_path_factory) -> PlantedSnapshots:
    root = tmp_path_factory.mktemp(f"planted-{snapshot_backend}")
    return run_planted(root, snapshot_backend, parallelism=2, checkpoint_every=400, move_clock=False)


@pytest.fixture(scope="session")
def planted_ttl(snapshot_backend, tmp_path_factory) -> PlantedSnapshots:
    root = tmp_path_factory.mktemp(f"planted-ttl-{snapshot_backend}")
    return run_planted(root, snapshot_backend, parallelism=1, checkpoint_every=None, move_clock=True)


def source_position(snapshot) -> int:
    """How many input records the job had read when ``snapshot`` was taken (from its metadata)."""
    total = 0
    for o in snapshot.reader.meta["operators"]:
        for sub in o["subtasks"]:
            for _split, offset in sub.get("source_positions") or []:
                total += int(offset)
    return total
