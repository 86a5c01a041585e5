"""The on-disk snapshot format shared by the engine (writer) and the explorer (reader).

A snapshot (checkpoint or savepoint) is a folder::

    _metadata                      header + JSON, written last (see below)
    keyed/<uid>/<state>/<subtask>.parquet
                                   keyed state of one state of one subtask
    timers/<uid>/<subtask>.parquet event- and processing-time timers
    operator/<uid>.json            operator list state and broadcast state
    inflight/<uid>/<subtask>.jsonl in-flight records of an unaligned checkpoint
    native/<uid>/<subtask>/...     incremental checkpoints of the RocksDB backend: a
                                   subtask's MANIFEST, CURRENT, OPTIONS; its SST files
                                   are in ``../shared/<uid>/`` (:mod:`explorer.format.rocksdb.native`),
                                   or here too in a full native checkpoint (nothing shared)

``_metadata`` starts with the 8 magic bytes ``b"SXSNAP\\r\\n"``, then the format
version (4 bytes, big-endian), the JSON length (8 bytes, big-endian), the JSON
(UTF-8), and a CRC-32 of the JSON (4 bytes). A reader refuses an unknown
magic or version and a CRC mismatch (a torn write). Every data file is listed
in the JSON with its size and SHA-256, or XXH3-128 (``"xxh3_128"``: the files
of a full native checkpoint, the shared SST files of incremental checkpoints and
the Parquet files of a canonical checkpoint, hashed at 20+ GB/s instead of ~1.8;
savepoints keep SHA-256, and so do shared files uploaded before XXH3-128 was used for them). Both detect
a damaged file alike (a random change escapes a 128-bit hash with probability
2^-128); neither authenticates a snapshot, whose ``_metadata`` carries only a CRC. All paths in the JSON are relative to
the snapshot folder and may not leave it, so a snapshot can be moved or
copied anywhere (savepoints are self-contained); incremental checkpoints
may also name files in the checkpoint directory's ``shared/`` area, one
level up, and nowhere else.

Keyed state files (:mod:`explorer.format.keyed`) are sorted by key group and
cut into Parquet row groups at key-group boundaries; the JSON maps each key
group to its row groups, so one key group or one subtask's range is read
without the rest.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import threading
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import SnapshotCorruptError, SnapshotFormatError, UnsafePathError
from . import budget
from .untrusted import own_file
from ..storage import as_path

try:  # XXH3-128 of full native checkpoints' files (a declared dependency)
    import xxhash
except ImportError:  # pragma: no cover - depends on the environment
    xxhash = None

MAGIC = b"SXSNAP\r\n"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
METADATA_FILE = "_metadata"
_HEADER = struct.Struct(">8sIQ")


def write_metadata(folder: Path, metadata: dict[str, Any]) -> Path:
    """Write ``_metadata`` atomically: to a temporary name, fsync, then rename."""
    body = json.dumps(metadata, sort_keys=True, separators=(",", ":"), default=_json_default).encode("utf-8")
    data = _HEADER.pack(MAGIC, FORMAT_VERSION, len(body)) + body + struct.pack(">I", zlib.crc32(body))
    tmp = folder / (METADATA_FILE + ".inprogress")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    final = folder / METADATA_FILE
    os.replace(tmp, final)
    _fsync_dir(folder)
    return final


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_metadata(folder: Path) -> dict[str, Any]:
    """Read and check ``_metadata`` of a snapshot folder (itself inside the folder once symlinks
    are resolved: a ``_metadata`` linking elsewhere is refused, never read)."""
    folder = as_path(folder)
    path = folder / METADATA_FILE
    real = path.resolve()
    if path.is_symlink() and folder.resolve() not in real.parents:
        raise UnsafePathError(f"{path}: a symlink to {real}, outside the snapshot folder; expected the snapshot's "
                              "own _metadata")
    try:
        if budget.current() is not None:  # its size before its bytes: the file is read whole
            budget.check(path.stat().st_size, file=path, what="the snapshot's _metadata (its file size)")
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise SnapshotFormatError(f"{path}: no such file; expected the _metadata of a State Explorer snapshot") from exc
    except OSError as exc:
        raise SnapshotCorruptError(f"{path}: unreadable ({exc}); expected the _metadata of a State Explorer snapshot") from exc
    if len(data) < _HEADER.size + 4:
        raise SnapshotCorruptError(f"{path}: {len(data)} bytes is shorter than the {_HEADER.size + 4}-byte header and trailer")
    magic, version, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotFormatError(f"{path}: found magic bytes {magic!r}, expected {MAGIC!r} (not a State Explorer snapshot)")
    if version not in SUPPORTED_VERSIONS:
        raise SnapshotFormatError(
            f"{path}: unrecognized snapshot format version {version}; this State Explorer reads versions "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))}"
        )
    end = _HEADER.size + length
    if len(data) != end + 4:
        raise SnapshotCorruptError(f"{path}: header announces {length} bytes of metadata, file holds {len(data) - _HEADER.size - 4} (torn write?)")
    body = data[_HEADER.size:end]
    (crc,) = struct.unpack_from(">I", data, end)
    if zlib.crc32(body) != crc:
        raise SnapshotCorruptError(f"{path}: metadata checksum mismatch (found {zlib.crc32(body):#010x}, expected {crc:#010x})")
    try:  # counted before parsed: ten million entries are refused, not built then refused
        meta = budget.loads(body, file=path, what="its metadata JSON")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # a matching CRC makes this unlikely
        raise SnapshotCorruptError(f"{path}: metadata is not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise SnapshotCorruptError(f"{path}: found metadata of type {type(meta).__name__}; expected a JSON object")
    _check_key_group_arrays(path, meta)
    return meta


def _check_key_group_arrays(path: Path, meta: dict[str, Any]) -> None:
    """Each keyed subtask's ``key_group_range`` inside ``[0, max_parallelism)`` and its per-key-group arrays
    (``records_per_key_group``) one count per key group of that range, before anything is built from them."""
    for o in meta.get("operators", ()) if isinstance(meta.get("operators"), list) else ():
        if not isinstance(o, dict):
            continue
        maxp = o.get("max_parallelism")
        where = f"{path}: operator {str(o.get('name'))!r}"
        for sub in o.get("subtasks", ()) if isinstance(o.get("subtasks"), list) else ():
            if not isinstance(sub, dict):
                continue
            kgr, rec = sub.get("key_group_range"), sub.get("records_per_key_group")
            if kgr is None:
                if rec is not None:
                    raise SnapshotFormatError(f"{where} subtask {sub.get('index')}: records_per_key_group without a "
                                              "key_group_range; expected both or neither")
                continue
            if not (isinstance(kgr, list) and len(kgr) == 2 and all(type(k) is int for k in kgr)
                    and isinstance(maxp, int) and 0 <= kgr[0] <= kgr[1] < maxp):
                raise SnapshotFormatError(f"{where} subtask {sub.get('index')}: key_group_range {str(kgr)[:80]}; "
                                          f"expected [first, last] with 0 <= first <= last < max parallelism {maxp}")
            if rec is None:
                continue
            width = kgr[1] - kgr[0] + 1
            if not isinstance(rec, list):
                raise SnapshotFormatError(f"{where} subtask {sub.get('index')}: records_per_key_group is a "
                                          f"{type(rec).__name__}; expected a list of {width} counts")
            if len(rec) != width:
                raise SnapshotFormatError(
                    f"{where} subtask {sub.get('index')}: records_per_key_group holds {len(rec):,} counts; expected "
                    f"{width}, one per key group of its range {kgr} (max parallelism {maxp})")
            bad = next((r for r in rec if type(r) is not int or r < 0), None)
            if bad is not None:
                raise SnapshotFormatError(f"{where} subtask {sub.get('index')}: records_per_key_group holds "
                                          f"{str(bad)[:40]!r}; expected counts (whole numbers >= 0)")


def referenced_files(meta: dict[str, Any]) -> list[str]:
    """Every data file the metadata's operators name (keyed state, timers, operator state,
    native RocksDB files), as metadata paths; each must also be in ``meta["files"]``."""
    out: list[str] = []
    for o in meta.get("operators", ()):
        for sub in o.get("subtasks", ()):
            native = sub.get("native")
            if native:
                out.extend(native.get("files", {}).values())
            else:
                out.extend(s["file"] for s in sub.get("states", ()) if s.get("file"))
            if sub.get("timers"):
                out.append(sub["timers"]["file"])
            if sub.get("operator_state"):
                out.append(sub["operator_state"])
    return out


def is_snapshot_folder(folder: Path) -> bool:
    p = own_file(as_path(folder), METADATA_FILE)  # a _metadata linking outside: refused before its magic is read
    if not p.is_file():
        return False
    with p.open("rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def resolve(folder: Path, relative: str) -> Path:
    """The file a metadata path names, refusing paths that escape the snapshot.

    ``shared/...`` paths of incremental checkpoints resolve in the parent folder. Containment
    is checked after resolving every symlink, the ``shared`` folder's own included: the
    target must lie inside the snapshot folder, or inside ``<parent>/shared`` as it really is
    below the real parent (a ``shared`` that links elsewhere is refused).
    """
    rel = PurePosixPath(relative)
    parts = rel.parts
    folder = as_path(folder)
    if rel.is_absolute() or not parts:
        raise UnsafePathError(f"{folder}: metadata names path {relative!r}; expected a relative path inside the snapshot")
    if parts[0] == "..":
        if len(parts) < 3 or parts[1] != "shared" or ".." in parts[2:]:
            raise UnsafePathError(f"{folder}: metadata names path {relative!r}, which leaves the snapshot folder")
        base, sub = folder.resolve().parent / "shared", parts[2:]
        start = base
    else:
        if ".." in parts:
            raise UnsafePathError(f"{folder}: metadata names path {relative!r}, which leaves the snapshot folder")
        base, sub = folder.resolve(), parts
        start = base
    target = (start / Path(*sub)).resolve()
    if base not in target.parents:
        raise UnsafePathError(f"{folder}: metadata names path {relative!r}, which resolves outside {base} (to {target}); "
                              "expected a file inside the snapshot (symlinks resolved)")
    return target


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def xxh3_128_file(path: Path) -> str:
    """The XXH3-128 of a file (hex), hashed from its pages mapped read-only (no copy into a buffer:
    half the CPU of reading it, which matters as the restore hashes beside its own work)."""
    if xxhash is None:  # pragma: no cover - depends on the environment
        raise SnapshotFormatError(f"{path}: its checksum is XXH3-128 and the xxhash package is not installed")
    h = xxhash.xxh3_128()
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return h.hexdigest()
        try:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # a file that cannot be mapped: read through one reused buffer
            buf = bytearray(4 << 20)
            view = memoryview(buf)
            while n := f.readinto(buf):
                h.update(view[:n])
            return h.hexdigest()
    with mapped:
        if hasattr(mapped, "madvise"):
            mapped.madvise(mmap.MADV_SEQUENTIAL)
        view = memoryview(mapped)
        try:
            for i in range(0, len(view), 16 << 20):
                h.update(view[i : i + (16 << 20)])
        finally:
            view.release()
    return h.hexdigest()


def file_entry(folder: Path, path: Path, checksum: str = "sha256") -> dict[str, Any]:
    """A data file's ``_metadata`` entry: its size and its ``checksum`` (``"sha256"`` or ``"xxh3_128"``)."""
    if checksum == "xxh3_128" and xxhash is not None:
        return {"bytes": path.stat().st_size, "xxh3_128": xxh3_128_file(path)}
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def check_file_size(folder: Path, relative: str, entry: dict[str, Any]) -> Path:
    """Check that a data file exists with its recorded size (cheap: no read); return its path."""
    path = resolve(folder, relative)
    if not path.is_file():
        raise SnapshotCorruptError(f"{path}: missing; the snapshot's metadata lists it ({entry.get('bytes')} bytes)")
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise SnapshotCorruptError(f"{path}: found {size} bytes, expected {entry['bytes']} (truncated or replaced?)")
    return path


def check_file_digest(path: Path, entry: dict[str, Any]) -> None:
    """Check a data file's SHA-256 (or XXH3-128) against its entry."""
    if "sha256" in entry:
        name, key, digest = "SHA-256", "sha256", sha256_file(path)
    elif "xxh3_128" in entry:
        name, key, digest = "XXH3-128", "xxh3_128", xxh3_128_file(path)
    else:
        raise SnapshotFormatError(f"{path}: its entry in the snapshot's metadata records no checksum "
                                  f"(found {sorted(entry)}, expected 'sha256' or 'xxh3_128')")
    if digest != entry[key]:
        raise SnapshotCorruptError(f"{path}: {name} {digest[:16]}… does not match the recorded {str(entry[key])[:16]}…")


def verify_file(folder: Path, relative: str, entry: dict[str, Any]) -> Path:
    """Check a data file against its size and checksum; return its path."""
    path = check_file_size(folder, relative, entry)
    check_file_digest(path, entry)
    return path


class BackgroundVerification:
    """Checksum checks (SHA-256, XXH3-128) of data files run in ``threads`` threads (hashlib and
    xxhash release the GIL on large buffers) while the restore loads them; :meth:`wait` joins them
    and raises the first mismatch found (the same :class:`SnapshotCorruptError` as :func:`verify_file`).

    Sizes are checked by the caller before (no read needed); this only hashes, the largest
    files first so that the threads finish together. The restore must call :meth:`wait` before
    any restored state is used, and treat a load error as a verification failure when
    :meth:`failed` after ``wait``.
    """

    def __init__(self, files: list[tuple[Path, dict[str, Any]]], threads: int = 1) -> None:
        self.files = files
        self.error: SnapshotCorruptError | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._todo = sorted(files, key=lambda f: int(f[1].get("bytes", 0)))  # popped from the end: largest first
        n = max(1, min(threads, len(files)))
        self._threads = [threading.Thread(target=self._run, name=f"snapshot-verify-{i}", daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if not self._todo or self.error is not None:
                    return
                path, entry = self._todo.pop()
            try:
                check_file_digest(path, entry)
            except SnapshotCorruptError as e:
                self._fail(e)
            except OSError as e:
                self._fail(SnapshotCorruptError(f"{path}: unreadable while checking its checksum ({e})"))

    def _fail(self, error: SnapshotCorruptError) -> None:
        with self._lock:
            if self.error is None:
                self.error = error

    @property
    def failed(self) -> bool:
        """Whether a mismatch has been found so far (no waiting)."""
        return self.error is not None

    def wait(self) -> None:
        """Wait until every file is checked; raise the mismatch if one was found."""
        error = self.finish()
        if error is not None:
            raise error

    def finish(self) -> SnapshotCorruptError | None:
        """Wait until every file is checked (or a mismatch is found); return the mismatch, if any."""
        for t in self._threads:
            t.join()
        return self.error

    def cancel(self) -> None:
        """Stop after the files being hashed (the restore failed for another reason)."""
        self._stop.set()
        for t in self._threads:
            t.join()


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def verify_snapshot(folder: Path) -> dict[str, Any]:
    """Read ``_metadata`` and check every data file it lists; return the metadata."""
    folder = Path(folder)
    meta = read_metadata(folder)
    for rel, entry in meta.get("files", {}).items():
        verify_file(folder, rel, entry)
    return meta
