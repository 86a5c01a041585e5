"""The numba kernels compiled ahead, at install: ``python -m explorer.kernels --warm``.

numba compiles a kernel the first time it is called with new argument types and, as every
kernel here is ``cache=True``, writes the machine code beside its source (``__pycache__/*.nbi``
index and ``*.nbc`` code; under ``NUMBA_CACHE_DIR`` when that is set, or a user cache folder when
the package folder is not writable). A later process loads it from there. Without that cache a
process decodes its first Flink strings and walks its first SST blocks in Python and NumPy
(``readers.flink.columnar.PYTHON_STRINGS``, ``format.sst.columns.NUMPY_BYTES``: a small snapshot
compiles nothing) and then compiles, 5-10 CPU-seconds, and a first diff ~15 more (``docs/performance.md``, "First open"); ``make venv`` runs this module once after ``pip install``
so that no user, CI run or Spark executor built from that environment meets the empty cache.

:func:`warm` calls each kernel module's ``warm()``, which calls every kernel the readers call on
tiny arrays of the types the readers pass (read-only or writable buffers alike: numba compiles
each combination apart), so the cache holds exactly the signatures the first open asks for
(``tests/test_kernel_cache.py`` checks that a fresh process then compiles nothing); and the
analyses' kernels (:func:`explorer.analysis.warm_kernels`: a large range's key numbering and
per-key sums, the diff, hot keys' loads), so that a first diff or hot keys compiles nothing either.

What makes numba compile again (safely: it recompiles and rewrites the cache, never loads stale
code for a changed kernel file): a kernel's source file changing size or modification time (a
``git pull``, an edit, a reinstall), another numba version, another Python version (the cache files
are named per version), another CPU model or feature set (a cache made on one machine and copied
to another: each CPU's code is kept beside the other's). numba's one blind spot: a kernel that calls
a kernel of *another* file (``_column_kernels.flink_strings`` inlines ``format.sst.kernels.varint``
and the Java hash of ``keygroups.kernels``) is not recompiled when only that other file changes;
running ``--warm`` after such an edit does not help either, delete the ``__pycache__`` folders.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numba
from numba.core.dispatcher import Dispatcher

from . import analysis
from .format import parquet_pages
from .format.sst import kernels as sst_kernels
from .format.sst import writer as sst_writer
from .keygroups import kernels as keygroup_kernels
from .readers.flink import columnar as flink_columnar
from .readers.spark import kernels as spark_kernels

#: each module's warm-up, in the order run; the first-open kernels first
WARM_UPS = (
    ("explorer.readers.flink (Java strings)", flink_columnar.warm_kernels),
    ("explorer.format.sst (SST entry walk, merge)", sst_kernels.warm),
    ("explorer.readers.spark (state store files)", spark_kernels.warm),
    ("explorer.keygroups (Java string hashes)", keygroup_kernels.warm),
    ("explorer.format.sst.writer (canonical checkpoints, restores)", sst_writer.warm_kernels),
    ("explorer.format.parquet_pages (engine Parquet page headers)", parquet_pages.warm_headers),
    ("explorer.analysis (key numbering, diff, hot keys' loads)", analysis.warm_kernels),
)


def dispatchers() -> list[Dispatcher]:
    """Every numba kernel of the explorer modules loaded in this process."""
    seen: dict[int, Dispatcher] = {}
    for name, module in list(sys.modules.items()):
        if not (name == "explorer" or name.startswith("explorer.")) or module is None:
            continue
        for value in list(vars(module).values()):
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, Dispatcher):
                    seen[id(item)] = item
    return list(seen.values())


def _per_kernel(stat: str) -> dict[str, int]:
    """``stat`` (numba's ``cache_misses`` or ``cache_hits``) summed per kernel, for kernels with any."""
    out = {}
    for d in dispatchers():
        n = sum(getattr(d.stats, stat).values())
        if n:
            out[f"{d.py_func.__module__}.{d.py_func.__qualname__}"] = n
    return out


def compile_counts() -> dict[str, int]:
    """Signatures compiled (not found in numba's cache) in this process, per kernel with any."""
    return _per_kernel("cache_misses")


def load_counts() -> dict[str, int]:
    """Signatures loaded from numba's cache in this process, per kernel with any."""
    return _per_kernel("cache_hits")


def warm(verbose: bool = False) -> dict[str, Any]:
    """Compile every kernel's signatures the readers use into numba's cache, or load them where it
    has them. Returns the kernels compiled and loaded, the seconds and the cache folder."""
    t0 = time.perf_counter()
    for label, step in WARM_UPS:
        t = time.perf_counter()
        step()
        if verbose:
            print(f"  {label}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    paths = sorted({str(d.stats.cache_path) for d in dispatchers() if d.stats.cache_path})
    return {"compiled": compile_counts(), "loaded": load_counts(), "seconds": time.perf_counter() - t0,
            "cache": paths}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.kernels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", action="store_true", help="compile the kernels into numba's cache (at install)")
    ap.add_argument("-v", "--verbose", action="store_true", help="the seconds of each module's warm-up")
    args = ap.parse_args(argv)
    if not args.warm:
        ap.print_help()
        return 2
    got = warm(args.verbose)
    compiled, loaded = sum(got["compiled"].values()), sum(got["loaded"].values())
    where = ", ".join(got["cache"]) or "no cache folder"
    print(f"numba {numba.__version__} kernels: {compiled} signatures compiled, {loaded} loaded from the cache, "
          f"in {got['seconds']:.1f} s ({where})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
