"""Fuzz the snapshot readers with damaged copies of real snapshots (issue 16).

Each *case* copies nothing: it damages one file of a private copy of a snapshot in place
(a bit flip, an overwrite, a truncation, an insertion, or a huge length field; or, issue 29's hostile
kinds, a path or file name inside the file rewritten to leave the snapshot (``..``, absolute), the file
replaced by a symlink to a copy of itself outside, a size bomb (a zip member or a Parquet value that
inflates past the budget), markup (HTML and ANSI) written over a name), opens the
snapshot with ``explorer.open`` in a forked child under a memory limit
(``resource.setrlimit(RLIMIT_AS)``) and a timeout, reads all keyed and operator state and
runs two analyses, then restores the file. The child reports what happened; the parent
classifies it:

=====================================  =================================================================
outcome                                meaning
=====================================  =================================================================
``ok-same``                            read as if undamaged (the damage hit bytes nobody reads)
``clean-error``                        a ``StateExplorerError`` naming the damaged file or the snapshot
``clean-error-unnamed``                a ``StateExplorerError`` that names neither (a bug)
``foreign-exception``                  any other exception (a bug: the error boundary leaked)
``crash``                              the child died of a signal (a bug)
``hang``                               the child ran past the timeout (a bug)
``oom``                                the child hit the memory limit (a bug)
``noted-change``                       different results, and the snapshot's notes (and a warning) say
                                       why: a damaged newest chk-N passed over for an older one
``silent-change-in-checksummed-file``  different results from a file that carries a checksum (a bug)
``silent-change-unchecksummed``        different results from a file without one (Flink ``_metadata``,
                                       heap streams: only structural checks can catch these)
``outside-read``                       the child opened a file outside the snapshot (a bug; seen by
                                       ``sys.addaudithook``'s ``open`` events, symlinks resolved)
``over-budget``                        the child's resident memory grew past ``BUDGET_MB`` (its
                                       ``memory_budget``) plus ``MARGIN_MB`` (a bug)
``unescaped-markup``                   ``markup-name``'s HTML tag or ESC reached the HTML or terminal
                                       summary raw (a bug)
=====================================  =================================================================

Each case costs what its read costs plus a fork: the parent imports everything and reads every
undamaged snapshot once (warming lazy imports and numba kernels), freezes what it holds out of the
garbage collector (so a child's collections do not copy its pages), keeps the damaged copies in
tmpfs, and a child compares its frames with the parent's undamaged ones with ``DataFrame.equals``
(an order-free digest of the rows only when they differ). ``--max-seconds`` stops a long run in
time; the report is rewritten every 500 cases, and ``--merge`` joins the reports of several seeds.

Run ``make fuzz N=10000`` (or ``python tools/fuzz/fuzz.py --n 10000 --seed 1``); the report
goes to ``benchmarks/results/fuzz.json`` with counts per format and outcome, the examples of
each bug outcome, the command, the machine, its load and the date. It lives in ``tools/``
rather than in the ``explorer`` package: it is a development tool that forks, sets rlimits and
writes into the repository, nothing a user of the library imports; ``tests/tools/test_fuzz.py``
runs a short fixed-seed run of it in ``make test``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GENERATED = "(generated)"

#: format name -> snapshot folder under the repository (the engine's, Flink's and Spark's sample data)
FORMATS: dict[str, str] = {
    "engine-heap": "sample_data/sessions/savepoint-heap",
    "engine-rocksdb-savepoint": "sample_data/sessions/savepoint-rocksdb",
    "engine-checkpoints": "sample_data/url_counts/checkpoints",
    "flink-heap": "sample_data/flink/heap-native-savepoint",
    "flink-heap-snappy": "sample_data/flink/heap-checkpoint-compressed",
    "flink-canonical-snappy": "sample_data/flink/rocksdb-canonical-savepoint-compressed",
    "flink-rocksdb-native": "sample_data/flink/rocksdb-native-savepoint",
    "flink-rocksdb-incremental": "sample_data/flink/rocksdb-incremental-checkpoint",
    "flink-sql": "sample_data/flink/sql-groupby-savepoint",
    # value-heavy state (POJOs, Rows, collections, java.time, Kryo 5), decoded column-wise by numba
    # kernels over many values at once (readers/flink/valuecolumns.py, kryocolumns.py)
    "flink-types-heap": "sample_data/flink/production/types-heap-canonical-savepoint",
    "flink-types-rocksdb": "sample_data/flink/production/types-rocksdb-native-savepoint",
    # written by the engine at the start of each run (see make_engine_incremental): native SST
    # files under shared/, referenced by several chk-N
    "engine-rocksdb-incremental": GENERATED,
    "spark-hdfs": "sample_data/spark/agg-hdfs",
    "spark-rocksdb": "sample_data/spark/spark35-dedup-watermark-rocksdb",
}

#: the share of cases a format gets relative to the others (default 1): about 0.1 CPU-second over a case's
#: cost, so that no format's slow read (value by value in Python, like the heap sample's lists and maps and
#: windows) takes most of a run, and every format still gets a quarter of the cases or more of the cheapest
#: (CPU seconds a case measured 2026-11-29, bomb-making amortised: flink-heap 0.17, flink-types-rocksdb
#: 0.33, flink-rocksdb-* 0.25, engine-checkpoints 0.11, spark-rocksdb 0.12; the rest 0.04-0.1)
WEIGHTS: dict[str, float] = {"flink-heap": 0.6, "flink-types-rocksdb": 0.3, "flink-rocksdb-native": 0.4,
                             "flink-rocksdb-incremental": 0.4, "engine-checkpoints": 0.9, "spark-rocksdb": 0.8}

#: byte damage, then issue 29's hostile kinds: a path or file name inside a file rewritten to point outside
#: (``..``, absolute; same length), a file replaced by a symlink to a copy of itself outside the snapshot, a
#: size bomb (a zip member or a Parquet value that inflates past the budget, else a huge length), markup
#: (HTML and ANSI) written over a name
BYTE_MUTATIONS = ("bitflip", "overwrite", "truncate", "insert", "huge-length", "copy-inside")
HOSTILE_MUTATIONS = ("path-rewrite", "symlink", "size-bomb", "markup-name")
MUTATIONS = BYTE_MUTATIONS + HOSTILE_MUTATIONS
BUG_OUTCOMES = ("clean-error-unnamed", "foreign-exception", "crash", "hang", "oom",
                "silent-change-in-checksummed-file", "outside-read", "over-budget", "unescaped-markup")

#: the memory budget each child reads with, and what its resident memory may grow by beyond it (the
#: analyses' frames and Python's own churn on the small sample snapshots: ~100 MB measured)
BUDGET_MB = 256
MARGIN_MB = 512
#: what a size bomb inflates to: past the budget, refused before it is allocated
BOMB_BYTES = 384 << 20
#: written over a name by ``markup-name``; rendered raw, it would be a tag and a colour change
MARKUP = b"<sx-x>\x1b[31m"
#: a child is a hang past ``timeout`` CPU seconds, or past this many times ``timeout`` of wall time
WALL_FACTOR = 10
#: the lock timing runs hold (``flock /tmp/bench.lock <benchmark>``): a run started with ``--yield-to``
#: starts no case while another process holds it, so a benchmark measures a quiet machine
BENCH_LOCK = "/tmp/bench.lock"

SST_MAGIC = (0x88E241B785F4CFF7).to_bytes(8, "little")


@dataclass
class Target:
    """One format's private copy: its files and the undamaged result's digest."""

    name: str
    root: Path
    files: list[Path]
    baseline: str = ""
    frames: tuple = ()
    notes: list[str] = field(default_factory=list)
    checksummed: dict[Path, bool] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)  # where a child may open files (_allowed_roots)
    names: list[bytes] = field(default_factory=list)  # its files' names and relative paths (path-rewrite)


def carries_checksum(fmt: str, path: Path) -> bool:
    """Whether every byte of ``path`` is covered by a checksum its format verifies."""
    if fmt.startswith("engine"):
        return True  # _metadata has its CRC-32, every data file its SHA-256
    if fmt.startswith("spark"):
        # every file the reader reads is checked against its Hadoop .crc side file when it has one
        # (state store files, RocksDB zips, offset and commit logs, metadata, state schemas)
        return path.with_name(f".{path.name}.crc").exists() or path.with_name(f"{path.name}.crc").exists()
    data = path.read_bytes()
    if len(data) >= 53 and data[-8:] == SST_MAGIC:
        return data[-53] != 0  # an SST whose footer names a checksum (the footer itself: magic, handles)
    return False


def read_all(path: Path, memory_budget: int | str | None = None, render: bool = False) -> tuple[tuple, list[str]]:
    """What a reader makes of the snapshot at ``path``: all its state and two analyses, and its notes.
    ``render``: also its HTML and text summaries, returned after the notes (for ``markup-name``)."""
    import warnings

    import explorer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        snap = explorer.open(path, memory_budget=memory_budget)
        frames = (snap.keyed_state(), snap.operator_state(), snap.hot_keys(5), snap.key_group_distribution())
        if render:
            from explorer.report import snapshot_html, summary_text

            return frames, [str(n) for n in snap.notes] + [snapshot_html(snap), summary_text(snap)]
    return frames, [str(n) for n in snap.notes]


def digest(frames) -> str:
    """An order-free digest of ``frames``' rows (slow: a repr per value; for frames that differ)."""
    h = hashlib.sha256()
    for frame in frames:
        rows = sorted("|".join(map(_safe_repr, row)) for row in frame.itertuples(index=False, name=None))
        h.update(repr((list(frame.columns), len(frame))).encode())
        for r in rows:
            h.update(r.encode())
    return h.hexdigest()


def result_digest(path: Path) -> tuple[str, list[str]]:
    """A digest of what a reader makes of the snapshot at ``path``, and its notes."""
    frames, notes = read_all(path)
    return digest(frames), notes


def same_as(frames, baseline) -> bool:
    """Whether ``frames`` equal the undamaged ``baseline`` frames: ``DataFrame.equals`` first (fast,
    vectorised), the order-free digest only when that differs."""
    try:
        if all(a.equals(b) for a, b in zip(frames, baseline)):
            return True
    except Exception:  # noqa: BLE001 - values whose comparison raises: the digest decides
        pass
    return False


def _safe_repr(value) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a Timestamp beyond Python's datetime range has no repr
        try:
            return f"<{type(value).__name__} {value.asm8!r}>"
        except Exception:  # noqa: BLE001
            return f"<{type(value).__name__}>"


def mutate(data: bytes, kind: str, rng: random.Random) -> bytes:
    n = len(data)
    if n == 0:
        return b"\x00"
    at = rng.randrange(n)
    if kind == "bitflip":
        b = bytearray(data)
        b[at] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == "overwrite":
        k = min(rng.choice((1, 2, 4, 8, 16)), n - at)
        return data[:at] + bytes(rng.randrange(256) for _ in range(k)) + data[at + k:]
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        k = rng.choice((1, 2, 4, 8))
        return data[:at] + bytes(rng.randrange(256) for _ in range(k)) + data[at:]
    if kind == "huge-length":
        k = min(rng.choice((4, 8)), n - at)
        big = rng.choice((b"\x7f\xff\xff\xff\xff\xff\xff\xff", b"\xff" * 8, b"\x00\x00\x00\x00\xff\xff\xff\xf0",
                          b"\xff\xff\xff\xff\x0f"))
        return data[:at] + big[:k] + data[at + k:]
    if kind == "copy-inside":
        k = min(8, n - at)
        src = rng.randrange(n)
        piece = data[src:src + k]
        return data[:at] + piece + data[at + len(piece):]
    raise ValueError(kind)


#: an existing file outside any snapshot, named by ``path-rewrite`` (absolute, or by enough ``..``)
_OUTSIDE = "etc/hostname"


def _escaping_path(length: int, rng: random.Random) -> bytes:
    """A path of exactly ``length`` bytes that leaves the folder it is joined to: absolute (``////etc/hostname``)
    or by ``..`` (``..///../../etc/hostname``), or only ``..`` segments when too short for a name."""
    if length < len(_OUTSIDE) + 3:
        return (b"../" * (length // 3 + 1))[:length]
    if rng.random() < 0.5:  # absolute: repeated slashes are one
        return ("/" * (length - len(_OUTSIDE)) + _OUTSIDE).encode()
    ups = (length - len(_OUTSIDE)) // 3
    extra = length - len(_OUTSIDE) - 3 * ups
    return (".." + "/" * (1 + extra) + "../" * (ups - 1) + _OUTSIDE).encode()


def path_rewrite(data: bytes, names: list[bytes], rng: random.Random) -> bytes:
    """``data`` with one mention of another file of the snapshot (its name or relative path) overwritten by a
    path of the same length leaving the snapshot; unchanged when the file mentions none."""
    found = [(m, len(name)) for name in names for m in _occurrences(data, name)]
    if not found:
        return data
    at, k = rng.choice(found)
    return data[:at] + _escaping_path(k, rng) + data[at + k:]


def _occurrences(data: bytes, name: bytes, cap: int = 8) -> list[int]:
    out, at = [], data.find(name)
    while at >= 0 and len(out) < cap:
        out.append(at)
        at = data.find(name, at + 1)
    return out


def markup_name(data: bytes, rng: random.Random) -> bytes:
    """``data`` with :data:`MARKUP` written over the start of one name-like run of text (unchanged if none)."""
    import re

    runs = [m.start() for m in re.finditer(rb"[A-Za-z][A-Za-z0-9_\-. ]{%d,}" % (len(MARKUP) - 1), data[:1 << 22])]
    if not runs:
        return data
    at = rng.choice(runs)
    return data[:at] + MARKUP + data[at + len(MARKUP):]


def size_bomb(data: bytes, path: Path, rng: random.Random) -> bytes:
    """A zip with one member that inflates to :data:`BOMB_BYTES`, a Parquet file with one value that does (its
    footer declaring it), anything else a huge length field. Zips and Parquet files are made in a forked
    child: the parent's memory (which every case's child inherits under its address-space limit) stays as
    it was."""
    if path.suffix not in (".zip", ".parquet"):
        return mutate(data, "huge-length", rng)
    pick = rng.random()
    # the same file bombed the same way is the same bytes: made once (inflating 384 MiB through deflate or
    # zstd takes about a second, most of a case's cost), kept small (a bomb compresses ~1000:1)
    key = (str(path), hashlib.sha256(data).hexdigest(), _bomb_victim(data, path.suffix, pick))
    if key in _BOMBS:
        return _BOMBS[key]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = _bomb_bytes(data, path.suffix, pick)
        except BaseException:  # noqa: BLE001 - no bomb: the case changes nothing
            out = data
        with os.fdopen(w, "wb") as f:
            f.write(out)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    os.waitpid(pid, 0)
    _BOMBS[key] = out or data
    return out or data


#: size bombs made so far, by file, content and victim (:func:`size_bomb`)
_BOMBS: dict[tuple, bytes] = {}


def _bomb_victim(data: bytes, suffix: str, pick: float) -> int:
    """Which member of a zip ``pick`` bombs (0 for anything else): what makes two bombs of one file differ."""
    if suffix != ".zip":
        return 0
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as src:
            count = len(src.infolist())
    except Exception:  # noqa: BLE001 - an undecodable zip: one bomb of its own
        count = 0
    return int(pick * max(count, 1))


def _first_difference(a: bytes, b: bytes) -> int:
    """The offset of the first byte where ``a`` and ``b`` differ (the shorter length when one is a prefix)."""
    import numpy as np

    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    diff = np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n)
    return int(diff.argmax())


def _bomb_bytes(data: bytes, suffix: str, pick: float) -> bytes:
    import io
    import zipfile

    if suffix == ".zip":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as src:
                members = [(i.filename, src.read(i)) for i in src.infolist()]
        except Exception:  # noqa: BLE001 - an undecodable zip: a bomb of its own
            members = []
        members = members or [("metadata", b"")]
        victim = int(pick * len(members))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for j, (name, body) in enumerate(members):
                if j != victim:
                    zf.writestr(name, body)
                    continue
                with zf.open(name, "w", force_zip64=True) as w:
                    w.write(body)
                    block = b" " * (1 << 20)
                    for _ in range(BOMB_BYTES >> 20):
                        w.write(block)
        return out.getvalue()
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(io.BytesIO(data))
    if not t.num_rows:
        return data
    t = t.append_column("zz_bomb", pa.array(["a" * BOMB_BYTES] + [None] * (t.num_rows - 1), pa.large_string()))
    out = io.BytesIO()
    pq.write_table(t, out, compression="zstd")
    return out.getvalue()


def _names_file(text: str, target: Target, file: Path) -> bool:
    return str(file) in text or str(target.root) in text or file.name in text


def _allowed_roots(target: Target, work: Path) -> list[str]:
    """Where a child may open files: the snapshot, Python and its packages, the system's own files and
    the explorer's code (never the fuzz folder around the snapshot, nor the repository's sample data)."""
    import site
    import tempfile as _tempfile

    roots = [str(target.root.resolve()), sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(),
             str(ROOT / "explorer"), str(ROOT / "tools"), "/usr", "/lib", "/etc/ssl", "/etc/localtime",
             "/proc", "/sys", "/dev/null", "/dev/urandom", os.path.expanduser("~/.cache")]
    tmp = os.path.realpath(_tempfile.gettempdir())
    if not str(work.resolve()).startswith(tmp + os.sep):
        roots.append(tmp)  # readers link RocksDB files into a temporary folder
    return [os.path.realpath(r) for r in roots]


def _audit_opens(roots: list[str], found: list[str]) -> None:
    """Record each file the process opens outside ``roots`` (symlinks resolved) in ``found``."""
    prefixes = tuple(r.rstrip(os.sep) + os.sep for r in roots)
    exact = set(roots)

    def hook(event: str, args: tuple) -> None:
        if event != "open" or not args or isinstance(args[0], int) or args[0] is None:
            return
        try:
            real = os.path.realpath(os.fsdecode(args[0]))
        except Exception:  # noqa: BLE001 - a path that does not decode: report it as it is
            real = repr(args[0])
        if not os.path.isfile(real):  # nothing read: an open that fails, or a folder (shutil.rmtree opens entries
            return  # relative to a dir_fd, which the event does not carry: "db" resolved against the cwd)
        if real not in exact and not real.startswith(prefixes) and len(found) < 10:
            found.append(real)

    sys.addaudithook(hook)


class _Unescaped(Exception):
    """Markup from a snapshot reached a rendered summary as it was."""


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def wait_for_quiet(lock: str | None, log=None) -> float:
    """Wait while another process holds ``lock`` (a timing run under ``flock``); return the seconds waited.
    The lock is only tried (and let go at once), never held across a case: a benchmark that starts
    meanwhile meets at most the rest of one case."""
    if not lock:
        return 0.0
    import fcntl

    waited, t0 = False, time.monotonic()
    while True:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:  # no lock file: nobody is timing anything
            return 0.0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return time.monotonic() - t0
        except BlockingIOError:
            if not waited and log:
                log(f"waiting: {lock} is held (a timing run)")
            waited = True
        finally:
            os.close(fd)
        time.sleep(1.0)


def run_child(target: Target, file: Path, timeout: float, memory_mb: int, kind: str = "bitflip",
              roots: list[str] | None = None) -> tuple[str, str]:
    """Read the (damaged) snapshot in a forked child; return (status, detail) from the child.

    The child reads with ``memory_budget`` :data:`BUDGET_MB` and reports ``over-budget`` when its resident
    memory grew by more than that plus :data:`MARGIN_MB` (the high-water mark is reset at the fork), and
    ``outside-read`` when it opened a file outside ``roots`` (``sys.addaudithook``'s ``open`` events,
    symlinks resolved); for ``markup-name``, ``unescaped-markup`` when :data:`MARKUP` reaches its HTML or
    text summary unescaped."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        status, detail = "crash", ""
        # tqdm's write lock holds a process-shared semaphore: one taken when the parent forked, or
        # left taken by an earlier child killed at its timeout, would block this child (and then
        # every later one) in its first progress bar. The child gets a lock of its own.
        import threading

        import tqdm

        tqdm.tqdm.set_lock(threading.RLock())
        try:
            limit = memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            # the timeout counts the child's CPU seconds, not the wall clock: a run at low priority on a
            # busy machine (`nice`) waits for a core without hanging (SIGXCPU at the soft limit)
            cpu_limit = max(1, int(timeout))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit + 5))
            from explorer.errors import StateExplorerError

            outside: list[str] = []
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # the high-water mark starts again at what the fork shares
            except OSError:
                pass
            base = _rss_kib("VmRSS")
            if roots is not None:
                _audit_opens(roots, outside)
            try:
                frames, notes = read_all(target.root, f"{BUDGET_MB}MB", render=kind == "markup-name")
                if kind == "markup-name":
                    notes, (page, text) = notes[:-2], notes[-2:]
                    if "<sx-x>" in page or "\x1b" in text:  # a tag in HTML, an ESC in a terminal
                        raise _Unescaped("<sx-x> in the HTML" if "<sx-x>" in page else "ESC in the terminal text")
                same = same_as(frames, target.frames)
                status, detail = "ok", [same, None if same else digest(frames), notes]
            except _Unescaped as exc:
                status, detail = "unescaped-markup", f"{exc} reached the rendered summary raw"
            except StateExplorerError as exc:
                chain, e = [], exc
                while e is not None:
                    chain.append(e)
                    e = e.__cause__
                if any(isinstance(c, MemoryError) for c in chain):
                    status, detail = "oom", str(exc)[:500]
                else:
                    status = "clean-error" if _names_file(str(exc), target, file) else "clean-error-unnamed"
                    detail = f"{type(exc).__name__}: {str(exc)[:500]}"
            except MemoryError as exc:
                status, detail = "oom", repr(exc)[:500]
            except BaseException as exc:  # noqa: BLE001 - what the harness is looking for
                frames = traceback.extract_tb(exc.__traceback__)
                ours = [f for f in frames if "/explorer/" in f.filename or "/tools/fuzz/" in f.filename]
                where = "; ".join(f"{f.filename.split('/')[-1]}:{f.lineno} {f.name}" for f in (ours[-3:] + frames[-1:]))
                status = "foreign-exception"
                detail = f"{type(exc).__module__}.{type(exc).__name__} at {where}: {str(exc)[:300]}"
            grown = (_rss_kib("VmHWM") - base) >> 10
            if outside:
                status, detail = "outside-read", f"opened {outside[:3]} ({status}: {str(detail)[:200]})"
            elif grown > BUDGET_MB + MARGIN_MB:
                status, detail = "over-budget", f"resident memory grew {grown} MiB ({status}: {str(detail)[:200]})"
        finally:
            try:
                os.write(w, json.dumps([status, detail]).encode())
            finally:
                os._exit(0)
    os.close(w)
    # the child's CPU limit is the timeout; the wall clock only catches a child that waits without
    # computing (a lock, a read that never returns), with room for a busy machine
    deadline = time.monotonic() + WALL_FACTOR * timeout
    while True:
        done, st, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return "hang", f"no answer within {WALL_FACTOR * timeout:.0f} s of wall time"
        time.sleep(0.005)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    if os.WIFSIGNALED(st):
        used = usage.ru_utime + usage.ru_stime
        if os.WTERMSIG(st) in (signal.SIGXCPU, signal.SIGKILL) and used >= 0.9 * max(1, int(timeout)):
            return "hang", f"ran past {timeout:.0f} CPU seconds"  # the soft, then the hard CPU limit
        return "crash", f"signal {os.WTERMSIG(st)}"
    try:
        return tuple(json.loads(b"".join(chunks)))  # type: ignore[return-value]
    except ValueError:
        return "crash", f"exit status {os.WEXITSTATUS(st)} without a report"


def make_engine_incremental(dst: Path) -> Path:
    """Write a small job's native incremental RocksDB checkpoints (SST files shared between
    chk-N under ``shared/``) into ``dst``; return the checkpoint directory."""
    from explorer.engine import CollectSink, KeyedProcessFunction, MapStateDescriptor, StreamEnvironment
    from explorer.engine import ValueStateDescriptor, WatermarkStrategy

    class Counting(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int))
            self.last = ctx.get_state(MapStateDescriptor("last_by_mod", int, str))

        def process_element(self, value, ctx, out):
            self.count.update(self.count.value(0) + 1)
            self.last[value[1] % 5] = f"v{value[1]}"
            out.collect(value)

    data = [(f"k{(i * 7919) % 97}", i) for i in range(3000)]
    env = StreamEnvironment(parallelism=2, batch_size=50, state_backend="rocksdb")
    env.enable_checkpointing(dst, interval_records=700, retained=3, incremental=True, asynchronous=False)
    ts = WatermarkStrategy.for_bounded_out_of_orderness(2).with_timestamp_assigner(lambda r: r[1])
    env.from_collection(data, ts, name="src").key_by(0).process(Counting(), name="counting").sink_to(
        CollectSink("out"), name="sink")
    env.execute("fuzz-incremental")
    return dst


def prepare(fmt: str, folder: str, work: Path, timeout: float, memory_mb: int) -> Target:
    dst = work / fmt
    if folder == GENERATED:
        make_engine_incremental(dst)
    else:
        shutil.copytree(ROOT / folder, dst, symlinks=True)
    files = sorted(p for p in dst.rglob("*") if p.is_file() and p.name not in ("EXPECTED.json", "README.md")
                   and not p.name.endswith(".crc"))
    t = Target(fmt, dst, files)
    t.checksummed = {p: carries_checksum(fmt, p) for p in files}
    # the undamaged result, read in the parent: this also warms what each forked child would
    # otherwise redo (lazy imports, numba kernels); the readers' thread pools end with each read
    t.frames, t.notes = read_all(dst)
    t.baseline = digest(t.frames)
    return t


def _cpu_seconds() -> float:
    """User and system CPU time of this process and its waited-for children so far."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _totals(counts: dict[str, dict[str, int]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for per in counts.values():
        for k, v in per.items():
            totals[k] = totals.get(k, 0) + v
    return totals


def fuzz(n: int, seed: int, formats: list[str], timeout: float, memory_mb: int,
         log=print, max_seconds: float | None = None, checkpoint=None, skip: int = 0,
         kinds: tuple[str, ...] = MUTATIONS, yield_to: str | None = None) -> dict:
    """Run up to ``n`` cases (fewer if ``max_seconds`` runs out); ``checkpoint(result)`` is
    called with the report so far every 500 cases, so that a run stopped early leaves its figures.
    ``skip``: draw the first ``skip`` cases of the seed without running them, so that a stopped
    run can be continued. ``yield_to``: a lock file (:data:`BENCH_LOCK`) whose holder, a timing run,
    this run waits for between cases (:func:`wait_for_quiet`). A case depends only on the seed and its number while the snapshots are
    the same; the engine checkpoints made afresh for each run may differ (file counts and sizes),
    so a continued run then draws cases of the same kinds, not always the same ones."""
    rng = random.Random(seed)
    counts: dict[str, dict[str, int]] = {f: {} for f in formats}
    by_kind: dict[str, dict[str, int]] = {}  # mutation kind -> outcome -> cases
    seconds: dict[str, float] = {f: 0.0 for f in formats}
    cpu: dict[str, float] = {f: 0.0 for f in formats}  # CPU seconds of parent and child: comparable under load
    examples: dict[str, list[dict]] = {}
    paused = 0.0  # seconds spent waiting for timing runs (yield_to)
    import explorer.snapshot  # noqa: F401 - imported once here, so that each forked child starts warm
    import tqdm

    tqdm.tqdm.monitor_interval = 0  # no monitor thread in the parent: it would hold tqdm's lock at some fork

    def result(done: int) -> dict:
        totals = _totals(counts)
        cases = {f: sum(c.values()) for f, c in counts.items()}
        return {"cases": done - skip, "first_case": skip, "seed": seed, "counts": counts, "totals": totals,
                "by_kind": by_kind, "examples": examples,
                "bugs": sum(totals.get(k, 0) for k in BUG_OUTCOMES),
                "paused_seconds": round(paused, 1),
                "seconds_per_case": {"value": round(sum(seconds.values()) / max(done - skip, 1), 4), "unit": "s",
                                     "by_format": {f: round(seconds[f] / cases[f], 4) for f in formats if cases[f]}},
                "cpu_seconds_per_case": {"value": round(sum(cpu.values()) / max(done - skip, 1), 4), "unit": "CPU s",
                                         "by_format": {f: round(cpu[f] / cases[f], 4) for f in formats if cases[f]}}}

    # damaged copies live in memory (tmpfs) where there is one: each case writes a file twice
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="state-explorer-fuzz-", dir=shm if shm.is_dir() else None) as tmp:
        targets = [prepare(f, FORMATS[f], Path(tmp), timeout, memory_mb) for f in formats]
        outside = Path(tmp) / "outside"  # beside the snapshots, inside no snapshot's roots
        outside.mkdir()
        for t in targets:
            t.roots = _allowed_roots(t, Path(tmp))
            t.names = sorted({n for p in t.files for n in (p.name.encode(), str(p.relative_to(t.root)).encode())
                              if len(n) >= 6}, key=len, reverse=True)
        weights = [WEIGHTS.get(f, 1.0) for f in formats]
        # what the parent holds stays out of the children's garbage collections: a collection would
        # touch (and so copy) every page of it in each child
        gc.collect()
        gc.freeze()
        t0 = time.monotonic()
        done = 0
        for i in range(n):
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                break
            t = rng.choices(targets, weights)[0]
            if i >= skip:
                paused += wait_for_quiet(yield_to, log)
            c0, u0 = time.monotonic(), _cpu_seconds()
            file = rng.choice(t.files)
            kind = rng.choice(kinds)
            original = file.read_bytes()
            if kind == "symlink":  # the file becomes a link to a copy of itself outside the snapshot
                damaged = original
            elif kind == "path-rewrite":
                damaged = path_rewrite(original, t.names, rng)
            elif kind == "size-bomb":
                damaged = size_bomb(original, file, rng)
            elif kind == "markup-name":
                damaged = markup_name(original, rng)
            else:
                damaged = mutate(original, kind, rng)
            if i < skip:
                done = i + 1
                continue
            where = _first_difference(original, damaged)
            if damaged == original and kind != "symlink":
                outcome, detail = "ok-same", "the mutation changed nothing"
            else:
                if kind == "symlink":
                    copy = outside / f"{i}-{file.name}"
                    copy.write_bytes(original)
                    file.unlink()
                    file.symlink_to(copy)
                else:
                    file.write_bytes(damaged)
                try:
                    status, detail = run_child(t, file, timeout, memory_mb, kind, t.roots)
                finally:
                    if file.is_symlink():
                        file.unlink()
                        copy.unlink()
                    file.write_bytes(original)
                if status == "ok":
                    same, digest_, notes = detail
                    if same or digest_ == t.baseline:
                        outcome = "ok-same"
                    elif notes != t.notes:
                        outcome = "noted-change"  # e.g. an older chk-N opened, with a note and a warning saying why
                        detail = [n for n in notes if n not in t.notes][:3]
                    else:
                        outcome = ("silent-change-in-checksummed-file" if t.checksummed[file]
                                   else "silent-change-unchecksummed")
                        detail = "results differ from the undamaged snapshot's"
                else:
                    outcome = status
            seconds[t.name] += time.monotonic() - c0
            cpu[t.name] += _cpu_seconds() - u0
            done = i + 1
            counts[t.name][outcome] = counts[t.name].get(outcome, 0) + 1
            by_kind.setdefault(kind, {})[outcome] = by_kind.get(kind, {}).get(outcome, 0) + 1
            if outcome in BUG_OUTCOMES or outcome == "silent-change-unchecksummed":
                ex = examples.setdefault(outcome, [])
                if len(ex) < 25:
                    ex.append({"format": t.name, "file": str(file.relative_to(t.root)), "mutation": kind,
                               "offset": where, "size": len(original), "new_size": len(damaged),
                               "case": i, "detail": detail})
            if log and done % 100 == 0:
                log(f"{done}/{n} cases, {time.monotonic() - t0:.0f} s: {_totals(counts)}")
            if checkpoint is not None and done % 500 == 0:
                checkpoint(result(done))
    return result(done)


def merge(reports: list[dict]) -> dict:
    """One report of several runs (different seeds): counts and seconds added, examples joined."""
    counts: dict[str, dict[str, int]] = {}
    by_kind: dict[str, dict[str, int]] = {}
    examples: dict[str, list[dict]] = {}
    cases, secs, cpu = 0, 0.0, 0.0
    fsecs: dict[str, float] = {}
    fcpu: dict[str, float] = {}
    for r in reports:
        cases += r["cases"]
        secs += r["seconds_per_case"]["value"] * r["cases"]
        rcpu = r.get("cpu_seconds_per_case", {"value": 0.0, "by_format": {}})
        cpu += rcpu["value"] * r["cases"]
        for f, per in r["counts"].items():
            mine = counts.setdefault(f, {})
            for k, v in per.items():
                mine[k] = mine.get(k, 0) + v
            fsecs[f] = fsecs.get(f, 0.0) + r["seconds_per_case"]["by_format"].get(f, 0.0) * sum(per.values())
            fcpu[f] = fcpu.get(f, 0.0) + rcpu["by_format"].get(f, 0.0) * sum(per.values())
        for kind, per in r.get("by_kind", {}).items():
            mine = by_kind.setdefault(kind, {})
            for k, v in per.items():
                mine[k] = mine.get(k, 0) + v
        for k, ex in r["examples"].items():
            examples.setdefault(k, []).extend({"seed": r.get("seed"), **e} for e in ex)  # a merged report's keep theirs
    totals = _totals(counts)
    return {"cases": cases, "seeds": [s for r in reports for s in r.get("seeds", [r.get("seed")])], "counts": counts,
            "totals": totals, "by_kind": by_kind,
            "examples": {k: v[:25] for k, v in examples.items()},
            "bugs": sum(totals.get(k, 0) for k in BUG_OUTCOMES),
            "seconds_per_case": {"value": round(secs / max(cases, 1), 4), "unit": "s",
                                 "by_format": {f: round(fsecs[f] / sum(counts[f].values()), 4)
                                               for f in counts if sum(counts[f].values())}},
            "cpu_seconds_per_case": {"value": round(cpu / max(cases, 1), 4), "unit": "CPU s",
                                     "by_format": {f: round(fcpu[f] / sum(counts[f].values()), 4)
                                                   for f in counts if sum(counts[f].values())}},
            "runs": [run for r in reports for run in r.get("runs") or [{k: r.get(k) for k in (
                "command", "seed", "first_case", "cases", "date", "seconds", "machine", "commit", "bugs")}]]}


def _commit() -> str | None:
    """The repository's commit the run tested (a dirty tree is marked), so that merged runs say which code they ran."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of damaged cases")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated, of: " + ", ".join(FORMATS))
    ap.add_argument("--timeout", type=float, default=60.0,
                    help=f"CPU seconds per case (and {WALL_FACTOR}x that of wall time)")
    ap.add_argument("--yield-to", nargs="?", const=BENCH_LOCK, default=None, metavar="LOCK",
                    help=f"start no case while another process holds LOCK (default {BENCH_LOCK}: "
                         "timing runs hold it with flock), so the fuzz can run beside benchmarks")
    ap.add_argument("--memory-mb", type=int, default=3072, help="address-space limit of each child")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop after this long (the report says how many ran)")
    ap.add_argument("--report", default=str(ROOT / "benchmarks/results/fuzz.json"))
    ap.add_argument("--kinds", default=",".join(MUTATIONS), help="comma-separated mutation kinds, of: "
                    + ", ".join(MUTATIONS))
    ap.add_argument("--skip", type=int, default=0,
                    help="continue a stopped run: draw (without running) the seed's first SKIP cases")
    ap.add_argument("--merge", nargs="+", default=None, metavar="REPORT",
                    help="instead of running: merge these reports (runs of other seeds) into --report")
    args = ap.parse_args(argv)
    if args.merge:
        merged = merge([json.loads(Path(r).read_text()) for r in args.merge])
        merged["command"] = " ".join([Path(sys.executable).name, "tools/fuzz/fuzz.py", *(argv or sys.argv[1:])])
        Path(args.report).write_text(json.dumps(merged, indent=2, default=str) + "\n")
        print(json.dumps({"cases": merged["cases"], "totals": merged["totals"], "bugs": merged["bugs"]}, indent=1))
        return 1 if merged["bugs"] else 0
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        ap.error(f"--formats: unknown {unknown}; expected some of {', '.join(FORMATS)}")
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if set(kinds) - set(MUTATIONS):
        ap.error(f"--kinds: unknown {sorted(set(kinds) - set(MUTATIONS))}; expected some of {', '.join(MUTATIONS)}")
    start = time.time()
    load_before = os.getloadavg()

    def finish(result: dict) -> dict:
        result.update({
            "command": " ".join([Path(sys.executable).name, "tools/fuzz/fuzz.py", *(argv or sys.argv[1:])]),
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
            "commit": _commit(),
            "seconds": round(time.time() - start, 1),
        })
        if args.report:
            Path(args.report).parent.mkdir(parents=True, exist_ok=True)
            Path(args.report).write_text(json.dumps(result, indent=2, default=str) + "\n")
        return result

    result = finish(fuzz(args.n, args.seed, formats, args.timeout, args.memory_mb,
                         log=lambda text: print(text, flush=True), max_seconds=args.max_seconds, checkpoint=finish,
                         skip=args.skip, kinds=kinds, yield_to=args.yield_to))
    print(json.dumps({"cases": result["cases"], "totals": result["totals"], "bugs": result["bugs"],
                      "seconds_per_case": result["seconds_per_case"]}, indent=1))
    return 1 if result["bugs"] else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
