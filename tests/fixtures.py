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
