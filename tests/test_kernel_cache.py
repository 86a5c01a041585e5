"""The install-time warm-up (``python -m explorer.kernels --warm``, run by ``make venv``) leaves
nothing for numba to compile on the first open of a Flink heap savepoint or RocksDB checkpoint in a
fresh process; a damaged cache is compiled again, not an error (issue 31).

Counted, not timed: numba's per-kernel cache misses (``explorer.kernels.compile_counts``) in a child
process whose ``NUMBA_CACHE_DIR`` is a folder only the warm-up has written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLINK = ROOT / "sample_data" / "flink"

pytestmark = pytest.mark.slow  # the warm-up compiles every kernel: ~20 CPU-seconds

_FIRST_OPEN = """
import json, sys
import explorer
from explorer.readers.base import KeyedStateQuery
snap = explorer.open(sys.argv[1])
rows = sum(p.num_rows for p in snap.reader.keyed_pieces(KeyedStateQuery()))
numba = "numba" in sys.modules
from explorer import kernels
print(json.dumps({"rows": rows, "numba": numba, "compiled": kernels.compile_counts(), "loaded": kernels.load_counts()}))
"""


def _run(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True, timeout=900)


def _first_open(path: Path, cache: Path) -> dict:
    out = _run(["-c", _FIRST_OPEN, str(path)], cache)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("numba-cache")
    out = _run(["-m", "explorer.kernels", "--warm"], cache)
    assert "signatures compiled" in out.stdout
    return cache


@pytest.mark.parametrize("sample", ["heap-canonical-savepoint", "rocksdb-incremental-checkpoint"])
def test_first_open_after_the_warm_up_compiles_no_kernel(warmed: Path, sample: str) -> None:
    got = _first_open(FLINK / sample, warmed)
    assert got["rows"] == 29289
    assert got["compiled"] == {}, f"compiled on the first open of {sample}: {got['compiled']}"
    if sample.startswith("rocksdb"):
        assert "explorer.format.sst.kernels.merge_runs" in got["loaded"]
    else:  # its strings decoded in Python (explorer.readers.flink.buffers.PYTHON_STRINGS): numba not even imported
        assert not got["numba"]


def test_a_second_warm_up_compiles_nothing(warmed: Path) -> None:
    out = _run(["-m", "explorer.kernels", "--warm"], warmed)
    assert " 0 signatures compiled" in out.stdout, out.stdout


def test_a_damaged_cache_is_compiled_again_not_an_error(warmed: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(warmed, cache)
    damaged = sorted(cache.rglob("*merge_runs*.nbi")) + sorted(cache.rglob("*scan_blocks*.nbc"))
    assert damaged
    for f in damaged:
        f.write_bytes(f.read_bytes()[:10])  # cut short, as by a full disk
    rocksdb = FLINK / "rocksdb-incremental-checkpoint"
    got = _first_open(rocksdb, cache)
    assert got["rows"] == 29289
    assert {"explorer.format.sst.kernels.merge_runs", "explorer.format.sst.kernels.scan_blocks"} <= set(got["compiled"])
    again = _first_open(rocksdb, cache)  # and written back: loaded from now on
    assert again["compiled"] == {}


def test_a_stale_cache_is_compiled_again(warmed: Path, tmp_path: Path) -> None:
    """A kernel's source changed since the warm-up: numba's index holds the source file's time and size
    of the warm-up, and they no longer match. Simulated on a copy of the cache by rewriting the stamp
    (the index is numba's pickle: its version, then the pickled stamp and entries)."""
    import pickle

    cache = tmp_path / "cache"
    shutil.copytree(warmed, cache)
    (index,) = cache.rglob("*merge_runs*.nbi")
    with open(index, "rb") as f:
        version = pickle.load(f)
        stamp, entries = pickle.loads(f.read())  # stamp: the source file's modification time first
    with open(index, "wb") as f:
        pickle.dump(version, f, protocol=-1)
        f.write(pickle.dumps(((stamp[0] - 60.0, *stamp[1:]), entries), protocol=-1))
    got = _first_open(FLINK / "rocksdb-incremental-checkpoint", cache)
    assert got["rows"] == 29289
    assert "explorer.format.sst.kernels.merge_runs" in got["compiled"]
