"""What a Spark checkpoint's files say without a JVM: format version, operators, partitions, bytes.

A Structured Streaming checkpoint keeps its stateful operators under
``state/<operatorId>/<partition>/`` (one store per shuffle partition; a
stream-stream join keeps four stores per partition, in sub-folders named
``left-keyToNumValues``, ``left-keyWithIndexToValue``, ``right-...``). Spark 4
adds ``state/<op>/_metadata/v1|v2/<batch>`` (operator name, stores, state
variables); Spark 3.x writes none, so operators are discovered from the folders.

Store files per version ``v`` (the micro-batch ``v - 1`` wrote them):

==========================  ==========================================
``v.delta`` / ``v.snapshot``  HDFS-backed store: changes / full state
``v.changelog`` / ``v.zip``   RocksDB store: changes / full checkpoint
``v_<uuid>.changelog|zip``    the same in checkpoint format v2, whose
                              ``commits/<batch>`` name the uuids
                              (``stateUniqueIds``)
==========================  ==========================================
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import SnapshotCorruptError, SnapshotFormatError
from ...format.checksums import crc32c, verify_hadoop_crc
from ...format.untrusted import Roots

__all__ = [
    "JOIN_STORES",
    "BatchMirror",
    "batch_files",
    "committed_batches",
    "StoreFile",
    "check_links",
    "checkpoint_format_version",
    "discover_operators",
    "links_outside",
    "missing_partitions",
    "resolved_copy",
    "store_schema_file",
    "store_files",
    "verified_bytes",
]

#: the four stores of a stream-stream join, in Spark's order
JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues",
               "right-keyWithIndexToValue")

_FILE = re.compile(r"^(\d+)(?:_([0-9a-fA-F-]{36}))?\.(delta|snapshot|changelog|zip)$")


@dataclass(frozen=True)
class StoreFile:
    """One state store file: its version (batch + 1), kind and size."""

    path: Path
    operator_id: int
    partition: int
    store: str
    version: int
    kind: str  # delta | snapshot | changelog | zip
    uuid: str | None
    size: int


def _read_log(f: Path, roots: Roots | Path) -> list[str]:
    return verified_text(f, roots).splitlines()


def checkpoint_format_version(path: Path, committed: list[int], roots: Roots | None = None) -> int:
    """1 or 2: ``stateUniqueIds`` in the latest commit log or ``<v>_<uuid>`` store files mean 2.
    ``roots``: where files may be read from (default: ``path``)."""
    if committed:
        lines = _read_log(Path(path) / "commits" / str(committed[-1]), roots or Roots.of(path))
        if len(lines) > 1:
            try:
                if "stateUniqueIds" in json.loads(lines[1]):
                    return 2
            except json.JSONDecodeError as exc:
                raise SnapshotFormatError(
                    f"{path}/commits/{committed[-1]}: expected a version line and a JSON line; line 2 "
                    f"({len(lines[1])} characters) is not JSON ({exc.msg} at character {exc.pos})") from exc
    state = Path(path) / "state"
    if state.is_dir():
        for f in state.glob("*/*/*"):
            m = _FILE.match(f.name)
            if m and m.group(2):
                return 2
    return 1


def _int_dirs(d: Path) -> list[int]:
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit())


@dataclass
class DiscoveredOperator:
    """An operator found from ``state/<id>/`` alone (no ``_metadata``)."""

    operator_id: int
    partitions: list[int]
    stores: list[str] = field(default_factory=list)

    @property
    def is_join(self) -> bool:
        return set(self.stores) == set(JOIN_STORES)


def discover_operators(path: Path) -> dict[int, DiscoveredOperator]:
    """Every ``state/<id>/`` folder as an operator, with its partitions and store names."""
    out = {}
    state = Path(path) / "state"
    for op_id in _int_dirs(state):
        parts = _int_dirs(state / str(op_id))
        stores = ["default"]
        if parts:
            sub = {p.name for p in (state / str(op_id) / str(parts[0])).iterdir() if p.is_dir()}
            if set(JOIN_STORES) <= sub:
                stores = list(JOIN_STORES)
        out[op_id] = DiscoveredOperator(op_id, parts, stores)
    return out


def has_operator_metadata(path: Path, operator_id: int) -> bool:
    return (Path(path) / "state" / str(operator_id) / "_metadata").exists()


def store_schema_file(path: Path, operator_id: int, store: str = "default") -> Path:
    """The key/value schema Spark keeps (in partition 0's folder) for one store."""
    d = Path(path) / "state" / str(operator_id) / "0"
    return (d if store == "default" else d / store) / "_metadata" / "schema"


def missing_partitions(path: Path, operator_id: int, num_partitions: int) -> list[int]:
    """Partition folders ``0..num_partitions-1`` of one operator that are not there."""
    have = set(_int_dirs(Path(path) / "state" / str(operator_id)))
    return [p for p in range(num_partitions) if p not in have]


def store_files(path: Path) -> list[StoreFile]:
    """Every store file of every operator, partition and store (``.crc`` files left out)."""
    out = []
    state = Path(path) / "state"
    for op_id in _int_dirs(state):
        for part in _int_dirs(state / str(op_id)):
            pdir = state / str(op_id) / str(part)
            dirs = [(pdir, "default")] + [(d, d.name) for d in pdir.iterdir() if d.is_dir() and d.name in JOIN_STORES]
            for d, store in dirs:
                for f in d.iterdir():
                    m = _FILE.match(f.name)
                    if m and f.is_file():
                        out.append(StoreFile(f, op_id, part, store, int(m.group(1)), m.group(3), m.group(2),
                                             f.stat().st_size))
    return out


def _schema_paths(meta_file: Path, roots: Roots) -> list[str]:
    roots.confine(meta_file)
    try:
        lines = meta_file.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines[1:]:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        for s in doc.get("stateStoreInfo", []) if isinstance(doc, dict) else []:
            out += list(s.get("stateSchemaFilePaths") or [])
    return out


def _local(p: str) -> str:
    return p[len("file:"):] if p.startswith("file:") else p


def foreign_schema_paths(path: Path, roots: Roots | None = None) -> dict[Path, list[str]]:
    """Operator metadata files that name schema files outside this checkpoint (a moved copy)."""
    root = str(Path(path).resolve())
    roots = roots or Roots.of(path)
    out: dict[Path, list[str]] = {}
    for f in (Path(path) / "state").glob("*/_metadata/v*/*"):
        if f.name.startswith(".") or not f.is_file():
            continue
        foreign = [p for p in _schema_paths(f, roots) if not _local(p).startswith(root + "/")]
        if foreign:
            out[f] = foreign
    return out


def links_outside(path: Path, roots: Roots) -> list[Path]:
    """The symlinks under ``path`` (not followed) whose targets resolve outside ``roots``, in walk order."""
    out = []
    for top, dirs, files in os.walk(path):
        for name in sorted(dirs) + sorted(files):
            p = Path(top) / name
            if p.is_symlink() and not roots.contains(p):
                out.append(p)
    return out


def check_links(path: Path, roots: Roots) -> None:
    """Refuse a checkpoint with a symlink out of ``roots`` before a reader that follows links itself (Spark's
    JVM) is given the folder: :class:`~explorer.errors.UnsafePathError` naming the first one."""
    bad = links_outside(path, roots)
    if bad:
        roots.confine(bad[0])


def resolved_copy(path: Path, cache_dir: Path | None = None, roots: Roots | None = None) -> Path:
    """``path`` itself, or for a moved checkpoint a folder Spark can read in its place.

    Spark 4 records the absolute path of ``transformWithState`` schema files in the operator
    metadata; in a copy they point at the original (gone, or worse: still there with another
    schema). The returned folder links every file of the copy and holds the metadata rewritten
    to point at the copy's own ``state/<op>/_stateSchema/...`` (found by the part after ``/state/``).
    """
    path = Path(path).resolve()
    roots = roots or Roots.of(path)
    foreign = foreign_schema_paths(path, roots)
    if not foreign:
        return path
    tmp = Path(tempfile.mkdtemp(prefix="explorer-spark-copy-", dir=cache_dir))
    for item in path.iterdir():
        if item.name != "state":
            (tmp / item.name).symlink_to(item)
    for op in (path / "state").iterdir():
        dst = tmp / "state" / op.name
        dst.mkdir(parents=True)
        for item in op.iterdir():
            if item.name != "_metadata":
                (dst / item.name).symlink_to(item)
        if (op / "_metadata").is_dir():
            shutil.copytree(op / "_metadata", dst / "_metadata", ignore=shutil.ignore_patterns(".*.crc"))
    for f, paths in foreign.items():
        rel = f.relative_to(path)
        text = roots.confine(f).read_text()
        for p in paths:
            local = _local(p)
            i = local.rfind("/state/")
            if i < 0:
                raise SnapshotFormatError(
                    f"{f}: schema file {p!r} is outside this checkpoint and not under a 'state/' folder; "
                    "expected <checkpoint>/state/<op>/_stateSchema/...")
            mine = path / local[i + 1:]
            if not mine.is_file():
                raise SnapshotFormatError(
                    f"{f}: names schema file {p!r} of the checkpoint it was copied from; the copy's own "
                    f"{mine} is missing too")
            text = text.replace(p, "file:" + str(mine))
        (tmp / rel).write_text(text)
    return tmp




_HADOOP_CRC_MAGIC = b"crc\x00"


def _check_spark_checksum(f: Path, data: bytes, sidecar: Path) -> None:
    """Spark 4's ``<name>.crc`` (checkpoint file checksums): JSON with the algorithm, value and file size."""
    raw = sidecar.read_bytes()
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotCorruptError(f"{sidecar}: expected Spark's checksum JSON; its {len(raw)} bytes are not JSON "
                                   f"({getattr(exc, 'msg', 'not UTF-8')} at byte {getattr(exc, 'pos', None) or getattr(exc, 'start', 0)})") from exc
    if not isinstance(doc, dict) or "value" not in doc:
        raise SnapshotCorruptError(f"{sidecar}: expected Spark's checksum JSON object with a 'value'; found "
                                   f"{type(doc).__name__} {sorted(doc)[:5] if isinstance(doc, dict) else ''}")
    if doc.get("algorithm") != "CRC32C":
        return  # another algorithm: nothing we can check (the file is still read)
    size = doc.get("mainFileSize")
    if size is not None and size != len(data):
        raise SnapshotCorruptError(f"{f}: has {len(data)} bytes, {sidecar.name} records {size} (the file was "
                                   "cut or changed)")
    stored = int(doc["value"]) & 0xFFFFFFFF
    computed = crc32c(data)
    if stored != computed:
        raise SnapshotCorruptError(f"{f}: has CRC-32C {computed:#010x}, {sidecar.name} records {stored:#010x} "
                                   "(the file is damaged)")


def verified_bytes(f: Path, roots: Roots | Path) -> bytes:
    """The bytes of a checkpoint file, checked against the checksum files next to it when there are any:
    Hadoop's ``.<name>.crc`` (CRC-32 per 512-byte chunk) and Spark 4's ``<name>.crc`` (CRC-32C of the file).
    ``roots``: the checkpoint folder (or :class:`~explorer.format.untrusted.Roots`) the file and its checksum
    files must resolve inside; one linking elsewhere is refused unread (:class:`~explorer.errors.UnsafePathError`)."""
    f = Path(f)
    roots = Roots.of(roots)
    for p in (f, f.with_name(f".{f.name}.crc"), f.with_name(f"{f.name}.crc")):
        if p is f or p.is_symlink():
            roots.confine(p)
    try:
        data = f.read_bytes()
    except OSError as exc:
        raise SnapshotFormatError(f"{f}: cannot read it ({exc.strerror})") from exc
    verify_hadoop_crc(f, data)
    spark = f.with_name(f"{f.name}.crc")
    if spark.is_file():
        _check_spark_checksum(f, data, spark)
    return data


def verified_text(f: Path, roots: Roots | Path) -> str:
    """A checkpoint log or metadata file (``offsets/N``, ``commits/N``, ``metadata``, an operator's
    ``_metadata/metadata``) as text, checked like :func:`verified_bytes`."""
    data = verified_bytes(f, roots)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotCorruptError(f"{f}: byte {exc.start} is not UTF-8 ({data[exc.start:exc.start + 4]!r}); "
                                   "expected Spark's JSON log text") from exc


# --- a checkpoint on an object store, fetched batch by batch -------------------------------------------
#: the store files holding a whole version (the others, deltas and changelogs, build on the one before)
_FULL = ("snapshot", "zip")
_LOG = re.compile(r"^(offsets|commits)/(\d+)$")


def _owner(name: str) -> str:
    """The file a Hadoop checksum side file belongs to (``.5.delta.crc`` -> ``5.delta``; v2's ``x.crc``, ``.x.crc.crc``)."""
    while name.endswith(".crc"):
        name = name[1:-4] if name.startswith(".") else name[:-4]
    return name


def committed_batches(rels: list[str]) -> list[int]:
    """The committed micro-batches of a checkpoint from its files' relative paths (``commits/<id>``)."""
    return sorted(int(m.group(2)) for r in rels if (m := _LOG.match(r)) and m.group(1) == "commits")


def batch_files(rels: list[str], batch: int) -> list[str]:
    """Of a checkpoint's files (relative paths), those reading micro-batch ``batch`` needs: ``metadata``; that
    batch's offset and commit logs (and the newest commit, which says the checkpoint format); every operator's
    metadata and schema files; and in each store folder the files of state version ``batch + 1`` back to the
    newest full snapshot (``.snapshot``/``.zip``) at or below it, with RocksDB's ``SSTs/`` (shared between
    versions). Left out: other batches' logs, ``sources/``, versions after the batch and before its snapshot.
    Each file's checksum side file goes with it."""
    version = batch + 1
    newest = max(committed_batches(rels), default=batch)
    versioned: dict[str, list[tuple[str, int, str]]] = {}
    out = []
    for rel in rels:
        parts = rel.split("/")
        owner = _owner(parts[-1])
        if len(parts) == 1:
            if owner == "metadata":
                out.append(rel)
            continue
        if parts[0] in ("offsets", "commits"):
            if len(parts) == 2 and owner.isdigit() and (int(owner) == batch or (parts[0] == "commits"
                                                                                 and int(owner) == newest)):
                out.append(rel)
            continue
        if parts[0] != "state":
            continue  # sources/, the sink's files: no state
        m = _FILE.match(owner)
        if m is None:
            out.append(rel)  # operator metadata, schemas, SSTs/
            continue
        versioned.setdefault("/".join(parts[:-1]), []).append((rel, int(m.group(1)), m.group(3)))
    for files in versioned.values():
        full = max((v for _, v, kind in files if kind in _FULL and v <= version), default=0)
        out.extend(rel for rel, v, _ in files if full <= v <= version)
    return sorted(out)


class BatchMirror:
    """A Spark checkpoint on an object store as a local folder holding only what the batches asked for need
    (:func:`batch_files`): one listing, then each batch's files fetched (through the cache) when first read.
    :meth:`everything` fetches the rest (Spark's own reader, a history over every batch)."""

    def __init__(self, remote: Any) -> None:
        self.remote = remote
        self.listing = remote.walk_files()
        self.rels = [f.relative_to(remote).as_posix() for f, _ in self.listing]
        self.committed = committed_batches(self.rels)
        self.local: Path | None = None
        self.batches: set[int] = set()
        self.whole = False

    def batch(self, batch: int) -> Path:
        """The local folder, with the files of ``batch``."""
        if not self.whole and batch not in self.batches:
            wanted = set(batch_files(self.rels, batch))
            self.local = self.remote.mirror(select=wanted.__contains__, into=self.local, files=self.listing)
            self.batches.add(batch)
        return self.local

    def everything(self) -> Path:
        """The local folder, with every file of the checkpoint."""
        if not self.whole:
            self.local = self.remote.mirror(into=self.local, files=self.listing)
            self.whole = True
        return self.local

    def note(self) -> str:
        got = "every file" if self.whole else f"the files of batch{'es' if len(self.batches) > 1 else ''} " \
            f"{', '.join(map(str, sorted(self.batches)))}"
        return (f"{self.remote}: read from a local mirror holding {got} (fetched once into the cache; other "
                f"batches' files are fetched when asked for), {self.local}")


#: operator kinds: what each Spark 4 operator name (``_metadata``'s ``operatorName``) is
OPERATOR_KINDS = {"stateStoreSave": "aggregation", "dedupe": "dedup", "dedupeWithinWatermark": "dedup_within_watermark",
                  "symmetricHashJoin": "join", "sessionWindowStateStoreSaveExec": "session_window",
                  "flatMapGroupsWithState": "group_state", "applyInPandasWithState": "group_state",
                  "transformWithStateExec": "transform_with_state",
                  "transformWithStateInPySparkExec": "transform_with_state"}
#: field names of Spark's aggregation buffers (one per slot: count, sum, avg's sum and count, ...)
_BUFFER_FIELDS = re.compile(r"^(count|sum|min|max|isEmpty|avg|first|last|valueSet|buf|"
                            r"(first|last)_?\w*|\w+(Set|List|Buffer))(_\d+)?$")


def operator_kind(spark_operator: str) -> str | None:
    """The kind of a Spark operator name (``stateStoreSave`` -> ``aggregation``), None if unknown."""
    if spark_operator.startswith("transformWithState"):
        return "transform_with_state"
    return OPERATOR_KINDS.get(spark_operator)


def infer_operator(key_schema: dict, value_schema: dict, stores: list[str]) -> str | None:
    """Spark 4's operator name for an operator without ``_metadata`` (Spark 3.x), told from its stores and
    state schema: a join's stores (``left-keyToNumValues`` ...); a session window's key ending in
    ``sessionStartTime`` (its value carrying the ``session_window`` column); dropDuplicates' value of no
    field (``__dummy__``, void) and dropDuplicatesWithinWatermark's ``expiresAtMicros``;
    (flatMap|applyInPandas)WithState's ``groupState`` and ``timeoutTimestamp``; an aggregation's buffer
    fields (``count``, ``sum``, ``min`` ...). None when nothing fits."""
    if any(s.endswith(("keyToNumValues", "keyWithIndexToValue")) for s in stores):
        return "symmetricHashJoin"
    keys = [f["name"] for f in key_schema.get("fields", [])]
    fields = value_schema.get("fields", [])
    names = [f["name"] for f in fields]
    if keys and keys[-1] == "sessionStartTime" or any((f.get("metadata") or {}).get("spark.sessionWindow")
                                                       for f in fields):
        return "sessionWindowStateStoreSaveExec"
    if not fields or all(f["type"] == "void" for f in fields):
        return "dedupe"
    if names == ["expiresAtMicros"]:
        return "dedupeWithinWatermark"
    if "groupState" in names and "timeoutTimestamp" in names:
        return "flatMapGroupsWithState"
    if keys and all(_BUFFER_FIELDS.match(n) for n in names):
        return "stateStoreSave"
    return None
