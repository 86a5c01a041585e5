"""The install-time warm-up (``python -m explorer.kernels --warm``, run by ``make venv``) leaves
nothing for numba to compile on the first open of a Flink heap savepoint or RocksDB checkpoint in a
fresh process; without it (an empty cache) the first open compiles nothing either, running the NumPy
forms of the SST kernels, and gives the same pieces; a damaged cache is compiled again, not an error
(issue 31). Nor on a first diff, hot keys or key-group distribution through the analyses' kernels.

Counted, not timed: numba's per-kernel cache misses (``explorer.kernels.compile_counts``) in a child
process whose ``NUMBA_CACHE_DIR`` is a folder only the warm-up has written, or an empty one.
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

pytestmark = pytest.mark.slow  # the warm-up compiles every kernel: ~50 CPU-seconds

_FIRST_OPEN = """
import hashlib, json, sys
import pyarrow as pa
import explorer
from explorer.readers.base import KeyedStateQuery
if len(sys.argv) > 2:  # "numba": the SST kernels whatever the cache holds (its own handling under test)
    from explorer.format.sst import columns
    columns.WALK = sys.argv[2]
snap = explorer.open(sys.argv[1])
pieces = list(snap.reader.keyed_pieces(KeyedStateQuery()))
numba = "numba" in sys.modules
def ipc(t):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()
digest = hashlib.sha256(b"".join(sorted(ipc(p) for p in pieces))).hexdigest()
from explorer import kernels
print(json.dumps({"rows": sum(p.num_rows for p in pieces), "numba": numba, "digest": digest,
                  "compiled": kernels.compile_counts(), "loaded": kernels.load_counts()}))
"""


def _run(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True, timeout=900)


def _first_open(path: Path, cache: Path, *walk: str) -> dict:
    out = _run(["-c", _FIRST_OPEN, str(path), *walk], cache)
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


@pytest.mark.parametrize("sample", ["heap-canonical-savepoint", "rocksdb-incremental-checkpoint"])
def test_first_open_with_an_empty_cache_compiles_nothing_and_reads_the_same(warmed: Path, tmp_path: Path,
                                                                             sample: str) -> None:
    """No warm-up: the SST walk and merge run in NumPy (``format/sst/_vectorised.py``), the strings in Python;
    the pieces equal, byte for byte, those of a first open with the install-time cache (the numba kernels)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    got = _first_open(FLINK / sample, empty)
    assert got["rows"] == 29289
    assert got["compiled"] == {}, f"compiled on the first open of {sample} with an empty cache: {got['compiled']}"
    assert not list(empty.rglob("*.nbi"))  # (and nothing written)
    kernels = _first_open(FLINK / sample, warmed)
    if sample.startswith("rocksdb"):
        assert "explorer.format.sst.kernels.merge_runs" in kernels["loaded"]
    assert got["digest"] == kernels["digest"]


_ANALYSES = """
import json, sys
import explorer
from explorer import kernels
from explorer.analysis import _columns, _common, hotkeys
diff = sys.modules["explorer.analysis.diff"]  # (explorer.analysis.diff is also the function's name)
# the kernel paths from the first row (a range takes them from 2**18 rows): the same kernels and signatures
_columns.KERNEL_ROWS = _common.KERNEL_ROWS = hotkeys.KERNEL_ROWS = 0
diff._SLICE_KEYS = 1 << 10  # the key join cut into slices of key groups, half on each thread (from 2**17 keys)
base, variant, heap = sys.argv[1:4]
from explorer.analysis import _ranges
from explorer.stored import ANALYSIS_BYTES_PER_ROW
rows = float(_ranges.rows_per_key_group(explorer.open(base)).sum())
streamed = {"memory_budget": int(rows * ANALYSIS_BYTES_PER_ROW / 4)}  # about 4 key-group ranges
# keys sorted per piece (number_sorted), and not (encode_strings); whole, and range by range (hot keys' loads)
for a, b, kw in ((base, variant, {}), (base, variant, streamed), (heap, heap, {})):
    snap, other = explorer.open(a, **kw), explorer.open(b, **kw)
    snap.key_group_distribution()
    snap.hot_keys(10, by="bytes")
    for unchanged in (False, True):
        explorer.diff(snap, other, unchanged=unchanged)
ours = lambda counts: {k: v for k, v in counts.items() if k.startswith("explorer.analysis.")}
print(json.dumps({"compiled": ours(kernels.compile_counts()), "loaded": ours(kernels.load_counts())}))
"""


def test_a_first_diff_and_hot_keys_after_the_warm_up_compile_no_analysis_kernel(warmed: Path, tmp_path: Path) -> None:
    """The analyses' kernels (key numbering, per-key sums, the diff's join and merge, hot keys' loads) on a
    generated engine savepoint and its variant, and on a heap savepoint: all loaded from the warm-up's cache."""
    from benchmarks._scale_inputs import engine_savepoint

    base = engine_savepoint(20_000, cache=tmp_path, progress=False)
    variant = engine_savepoint(20_000, variant=True, cache=tmp_path, progress=False)
    cache = tmp_path / "cache"
    shutil.copytree(warmed, cache)  # (the module's cache stays as the warm-up left it)
    out = _run(["-c", _ANALYSES, str(base), str(variant), str(FLINK / "heap-canonical-savepoint")], cache)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["compiled"] == {}, f"compiled on a first diff after the warm-up: {got['compiled']}"
    for kernel in ("_key_kernels.number_sorted", "_key_kernels.encode_strings", "_key_kernels.per_key_sums",
                   "_diff_kernels.join_slices", "_diff_kernels.merge_state", "_hot_kernels.subtask_sums"):
        assert f"explorer.analysis.{kernel}" in got["loaded"], kernel  # the kernel paths were taken


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
    got = _first_open(rocksdb, cache, "numba")
    assert got["rows"] == 29289
    assert {"explorer.format.sst.kernels.merge_runs", "explorer.format.sst.kernels.scan_blocks"} <= set(got["compiled"])
    again = _first_open(rocksdb, cache, "numba")  # and written back: loaded from now on
    assert again["compiled"] == {}
    for f in sorted(cache.rglob("*merge_runs*.nbi")):
        f.write_bytes(f.read_bytes()[:10])
    small = _first_open(rocksdb, cache)  # a damaged index is no kernel in the cache: the NumPy forms, no error
    assert small["rows"] == 29289 and small["compiled"] == {} and small["digest"] == got["digest"]


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
    got = _first_open(FLINK / "rocksdb-incremental-checkpoint", cache, "numba")
    assert got["rows"] == 29289
    assert "explorer.format.sst.kernels.merge_runs" in got["compiled"]
