"""Flink's checkpoint/savepoint ``_metadata`` file, versions 3 to 7.

Layout (big-endian, Java ``DataOutput``)::

    int   magic 0x4960672D
    int   version                       (3 = Flink 1.11+, 4 adds checkpoint properties,
                                         5 adds operator name and uid, 6 changes the
                                         unaligned channel-state handles, 7 adds a
                                         per-subtask reference checkpoint id)
    long  checkpoint id
    int   number of master states, each: int magic 0xC96B1696, int length, payload
    int   number of operators, each:
          [v5+] utf name, utf uid       ("" when not set)
          long, long                    OperatorID (lower half, upper half)
          int parallelism, int max parallelism
          stream handle                 operator-coordinator state (or null)
          int number of subtasks        (negative: operator fully finished)
          each subtask: int index (negative -i-1: finished), then
              int has-managed-operator-state, [operator state handle]
              int has-raw-operator-state, [operator state handle]
              keyed state handle (managed), keyed state handle (raw)
              input-channel and result-subpartition state collections: int count, then
              per handle [v5+: byte type, 1/2 plain, 3/4 merged] a plain handle (int
              subtask, int gate/partition, int channel, int n + n x long offsets,
              long size, stream handle) or a merged one (int subtask, long size,
              stream handle, int n + n bytes of offsets): in-flight records of an
              unaligned checkpoint, which are counted and skipped
              [v7] byte has-reference-id, [long id]
    [v4+] CheckpointProperties, Java-serialized (parsed by javaser, never executed)

Handles start with a one-byte type: 0 null, 1 inline bytes, 2 file, 3/12 key
groups (12 adds a handle id), 4 operator state, 5/11 incremental RocksDB (11 adds
checkpointed size and handle id), 6 relative file, 7 savepoint key groups,
8/14 changelog backend (materialized handles plus changelog parts: 9 inline changes,
10/13 change sets in files; see ``changelog``), 15 segment of a shared file and 16
an empty one, 17 operator state in a segment (15 to 17: file-merging checkpoints,
Flink 1.20+, see below).

File merging (``execution.checkpointing.file-merging.enabled``) puts many handles'
bytes into a few shared files. A segment handle (15) is ``long start, long size,
int scope (0 exclusive/task-owned, 1 shared), utf file path, utf logical file
id``; an empty segment (16) has no payload. Operator state in segments (17) is an
operator state handle (as type 4: named states with mode and offsets, offsets
relative to the segment) followed by ``utf task-owned directory, utf shared
directory, boolean empty`` and then its stream handle (15 or 16).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import FlinkFormatError, SnapshotCorruptError, SnapshotFormatError
from ...keygroups import UPPER_BOUND_MAX_PARALLELISM
from .datainput import DataInput
from .handles import (
    ChangelogHandle,
    ChangelogPart,
    IncrementalHandle,
    KeyGroupsHandle,
    OperatorStreamHandle,
    StreamHandle,
)
from .javaser import parse_java_object

MAGIC = 0x4960672D
MASTER_STATE_MAGIC = 0xC96B1696 - (1 << 32)
SUPPORTED_VERSIONS = (3, 4, 5, 6, 7)

NULL_HANDLE, BYTE_STREAM, FILE_STREAM, KEY_GROUPS, OPERATOR_STATE = 0, 1, 2, 3, 4
INCREMENTAL, RELATIVE_STREAM, SAVEPOINT_KEY_GROUPS = 5, 6, 7
CHANGELOG, CHANGELOG_BYTES, CHANGELOG_FILES, CHANGELOG_FILES_V2, CHANGELOG_V2 = 8, 9, 10, 13, 14
INCREMENTAL_V2, KEY_GROUPS_V2 = 11, 12
SEGMENT_FILE, EMPTY_SEGMENT_FILE, SEGMENT_OPERATOR_STATE = 15, 16, 17
OPERATOR_STATE_MODES = ("SPLIT_DISTRIBUTE", "UNION", "BROADCAST")


@dataclass
class SubtaskState:
    index: int
    finished: bool = False
    managed_operator: OperatorStreamHandle | None = None
    raw_operator: OperatorStreamHandle | None = None
    managed_keyed: KeyGroupsHandle | IncrementalHandle | ChangelogHandle | None = None
    raw_keyed: KeyGroupsHandle | IncrementalHandle | ChangelogHandle | None = None
    channel_state_handles: int = 0  # in-flight data of an unaligned checkpoint (skipped)


@dataclass
class OperatorState:
    name: str | None
    uid: str | None
    operator_id: str
    parallelism: int
    max_parallelism: int
    subtasks: list[SubtaskState] = field(default_factory=list)
    fully_finished: bool = False
    #: the operator coordinator's state (new Source API sources keep their split enumerator here)
    coordinator: StreamHandle | None = None
    #: a name inferred from the states the operator holds (a SQL operator in metadata that stores no names,
    #: ``operatorid.infer_operator_name``), used only when neither a name nor a uid is known
    inferred_name: str | None = None

    @property
    def display_name(self) -> str:
        return self.name or self.uid or self.inferred_name or self.operator_id


@dataclass
class CheckpointMetadata:
    path: Path
    version: int
    checkpoint_id: int
    master_states: int
    operators: list[OperatorState]
    properties: dict[str, Any] | None
    #: the checkpoint properties as stored (Java serialization), for writers that keep them unchanged
    properties_bytes: bytes | None = None
    #: the master states as stored (each magic, length, payload; opaque hook state), for writers that keep them
    master_states_bytes: bytes = b""

    @property
    def is_savepoint(self) -> bool | None:
        t = (self.properties or {}).get("checkpointType")
        if isinstance(t, dict):
            return "SavepointType" in str(t.get("@class"))
        return None

    @property
    def savepoint_format(self) -> str | None:
        """"CANONICAL" or "NATIVE" for savepoints, else None."""
        t = (self.properties or {}).get("checkpointType")
        if isinstance(t, dict):
            fmt = t.get("formatType")
            if isinstance(fmt, dict):
                return fmt.get("name")
        return None


class _MetadataParser:
    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.inp = DataInput(data)
        self.version = 0

    def fail(self, what: str, exc: Exception | None = None) -> SnapshotCorruptError:
        return SnapshotCorruptError(f"{self.path}: {what} at byte {self.inp.pos} (metadata version {self.version})")

    def parse(self) -> CheckpointMetadata:
        inp = self.inp
        if len(inp.buf) < 8:
            raise SnapshotFormatError(
                f"{self.path}: found {len(inp.buf)} bytes, expected at least 8 (magic number and version)"
            )
        magic = inp.read_uint()
        if magic != MAGIC:
            raise SnapshotFormatError(
                f"{self.path}: found magic number {magic:#010x}, expected {MAGIC:#010x} (Flink checkpoint metadata)"
            )
        self.version = version = inp.read_int()
        if version not in SUPPORTED_VERSIONS:
            raise SnapshotFormatError(
                f"{self.path}: found metadata version {version}, expected one of "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))} (Flink 1.11 to 2.x)"
            )
        try:
            checkpoint_id = inp.read_long()
            if checkpoint_id < 0:
                raise SnapshotCorruptError(f"{self.path}: found checkpoint id {checkpoint_id}, expected >= 0")
            n_master = inp.read_int()
            if n_master < 0:
                raise SnapshotCorruptError(f"{self.path}: found {n_master} master states, expected >= 0")
            masters_at = inp.pos
            for _ in range(n_master):
                if inp.read_int() != MASTER_STATE_MAGIC:
                    raise self.fail("master state magic number 0xc96b1696 not found")
                inp.skip(inp.read_int())
            masters = bytes(inp.buf[masters_at : inp.pos])
            n_ops = inp.read_int()
            if n_ops < 0 or n_ops > 1_000_000:
                raise self.fail(f"implausible operator count {n_ops}")
            operators = [self.operator() for _ in range(n_ops)]
            properties = properties_bytes = None
            if version >= 4 and not inp.at_end():
                properties_bytes = bytes(inp.buf[inp.pos:])
                try:
                    properties = parse_java_object(inp)
                except (FlinkFormatError, UnicodeDecodeError) as exc:
                    raise self.fail(f"checkpoint properties unreadable ({exc})") from exc
        except EOFError as exc:
            raise SnapshotCorruptError(
                f"{self.path}: file ends early at byte {inp.pos} of {len(inp.buf)} ({exc}); truncated metadata?"
            ) from exc
        except UnicodeDecodeError as exc:  # a damaged string (a name, a path, a uid)
            raise SnapshotCorruptError(
                f"{self.path}: found a string that is not UTF-8 before byte {inp.pos} ({exc}); damaged metadata?"
            ) from exc
        return CheckpointMetadata(self.path, version, checkpoint_id, n_master, operators, properties, properties_bytes,
                                  masters)

    def operator(self) -> OperatorState:
        inp = self.inp
        name = uid = None
        if self.version >= 5:
            name = inp.read_utf() or None
            uid = inp.read_utf() or None
        lower, upper = inp.read_long(), inp.read_long()
        op_id = (lower & (2**64 - 1)).to_bytes(8, "big").hex() + (upper & (2**64 - 1)).to_bytes(8, "big").hex()
        parallelism, max_parallelism = inp.read_int(), inp.read_int()
        if not 0 < parallelism <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:  # as Flink's OperatorState demands
            raise SnapshotCorruptError(
                f"{self.path}: operator {op_id} has parallelism {parallelism} and max parallelism {max_parallelism}; "
                f"expected 0 < parallelism <= max parallelism <= {UPPER_BOUND_MAX_PARALLELISM} (the metadata is damaged)")
        coordinator = self.stream_handle()
        n = inp.read_int()
        op = OperatorState(name, uid, op_id, parallelism, max_parallelism, coordinator=coordinator)
        if n < 0:
            op.fully_finished = True
            return op
        for _ in range(n):
            idx = inp.read_int()
            if idx < 0:
                op.subtasks.append(SubtaskState(-idx - 1, finished=True))
                continue
            op.subtasks.append(self.subtask(idx))
        return op

    def subtask(self, idx: int) -> SubtaskState:
        inp = self.inp
        st = SubtaskState(idx)
        if inp.read_int() != 0:
            st.managed_operator = self.operator_handle()
        if inp.read_int() != 0:
            st.raw_operator = self.operator_handle()
        st.managed_keyed = self.keyed_handle()
        st.raw_keyed = self.keyed_handle()
        for _ in ("input channels", "result subpartitions"):
            count = inp.read_int()
            if count < 0:
                raise self.fail(f"found {count} channel state handles, expected >= 0")
            for _ in range(count):
                self.channel_handle()
            st.channel_state_handles += count
        if self.version >= 7 and inp.read_byte() == 1:
            inp.read_long()
        return st

    def channel_handle(self) -> None:
        """Skip one channel state handle (see module doc)."""
        inp = self.inp
        typed = self.version >= 6 or (self.version == 5 and inp.buf[inp.pos] != 0)
        kind = inp.read_ubyte() if typed else 1
        if kind in (1, 2):
            inp.read_int()  # subtask
            inp.read_int()  # gate or partition index
            inp.read_int()  # channel or subpartition index
            inp.skip(8 * inp.read_int())  # offsets
            inp.read_long()  # size
            self.stream_handle()
        elif kind in (3, 4):
            inp.read_int()  # subtask
            inp.read_long()  # size
            self.stream_handle()
            inp.skip(inp.read_int())  # serialized channel offsets
        else:
            raise self.fail(f"found channel state handle type {kind}, expected 1 to 4")

    def operator_handle(self) -> OperatorStreamHandle | None:
        inp = self.inp
        t = inp.read_byte()
        if t == NULL_HANDLE:
            return None
        if t not in (OPERATOR_STATE, SEGMENT_OPERATOR_STATE):
            raise self.fail(f"found operator state handle type {t}, expected {OPERATOR_STATE} or "
                            f"{SEGMENT_OPERATOR_STATE} (file merging)")
        states = {}
        n = inp.read_int()
        if n < 0:
            raise self.fail(f"found {n} operator states in a handle, expected >= 0")
        for _ in range(n):
            name = inp.read_utf()
            mode = inp.read_byte()
            offsets = [inp.read_long() for _ in range(self.count("operator state offsets"))]
            states[name] = (OPERATOR_STATE_MODES[mode] if 0 <= mode < 3 else f"MODE_{mode}", offsets)
        if t == SEGMENT_OPERATOR_STATE:
            inp.read_utf()  # task-owned directory of the file-merging manager
            inp.read_utf()  # shared directory
            empty = inp.read_byte() != 0  # the stream handle below is then an empty segment
            stream = self.stream_handle()
            # an operator without operator state still writes a handle here: no state, no bytes
            return None if empty and not states else OperatorStreamHandle(states, stream)
        return OperatorStreamHandle(states, self.stream_handle())

    def count(self, what: str) -> int:
        """An int count of list elements, checked against the bytes left (each at least one byte)."""
        n = self.inp.read_int()
        if n < 0 or n > len(self.inp.buf) - self.inp.pos:
            raise self.fail(f"found {n} {what}, expected 0 to {len(self.inp.buf) - self.inp.pos} (bytes left)")
        return n

    def keyed_handle(self) -> KeyGroupsHandle | IncrementalHandle | ChangelogHandle | None:
        inp = self.inp
        t = inp.read_byte()
        if t == NULL_HANDLE:
            return None
        if t in (KEY_GROUPS, KEY_GROUPS_V2, SAVEPOINT_KEY_GROUPS):
            start, n = inp.read_int(), inp.read_int()
            offsets = [inp.read_long() for _ in range(n)]
            stream = self.stream_handle()
            if t == KEY_GROUPS_V2:
                inp.read_utf()  # state handle id
            return KeyGroupsHandle(start, offsets, stream, savepoint=(t == SAVEPOINT_KEY_GROUPS))
        if t in (INCREMENTAL, INCREMENTAL_V2):
            cp_id = inp.read_long()
            backend = inp.read_utf()
            start, n = inp.read_int(), inp.read_int()
            size = inp.read_long() if t == INCREMENTAL_V2 else None
            meta = self.stream_handle()
            shared = self.handle_list()
            private = self.handle_list()
            if t == INCREMENTAL_V2:
                inp.read_utf()
            return IncrementalHandle(cp_id, backend, start, n, size, meta, shared, private)
        if t in (CHANGELOG, CHANGELOG_V2):
            start, n = inp.read_int(), inp.read_int()
            size = inp.read_long()
            materialized = []
            for _ in range(self.count("materialized handles")):
                h = self.keyed_handle()
                if isinstance(h, ChangelogHandle):
                    raise self.fail("found a changelog handle inside a changelog handle's materialized state")
                if h is not None:
                    materialized.append(h)
            parts = []
            for _ in range(self.count("changelog handles")):
                parts.append(self.changelog_part())
            materialization_id = inp.read_long()
            if t == CHANGELOG_V2:
                inp.read_long()  # checkpoint id
            inp.read_utf()  # state handle id
            return ChangelogHandle(start, n, size, materialized, parts, materialization_id)
        if t in (CHANGELOG_BYTES, CHANGELOG_FILES, CHANGELOG_FILES_V2):
            raise self.fail(f"found changelog handle type {t} outside a changelog state backend handle")
        raise self.fail(f"found keyed state handle type {t}, expected one of 0, 3, 5, 7, 8, 11, 12, 14")

    def changelog_part(self) -> ChangelogPart:
        inp = self.inp
        t = inp.read_byte()
        if t == CHANGELOG_BYTES:
            part = ChangelogPart(inp.read_int(), inp.read_int())
            inp.read_long(), inp.read_long()  # sequence numbers from, to
            for _ in range(self.count("inline state changes")):
                kg = inp.read_int()
                n = inp.read_int()
                if n < 0:
                    raise self.fail(f"found a state change of {n} bytes, expected >= 0")
                part.changes.append((kg, inp.read_bytes(n)))
            inp.read_utf()  # state handle id
            return part
        if t in (CHANGELOG_FILES, CHANGELOG_FILES_V2):
            part = ChangelogPart(inp.read_int(), inp.read_int())
            for _ in range(self.count("changelog file handles")):
                offset = inp.read_long()
                h = self.stream_handle()
                if offset < 0 or h is None:
                    raise self.fail(f"found a changelog file handle at offset {offset} ({h}), expected a "
                                    "stream handle and an offset >= 0")
                part.streams.append((offset, h))
            inp.read_long(), inp.read_long()  # state size, checkpointed size
            inp.read_utf()  # state handle id
            if t == CHANGELOG_FILES_V2:
                inp.read_utf()  # storage identifier
            return part
        raise self.fail(f"found changelog handle type {t}, expected 9, 10 or 13")

    def handle_list(self) -> list[tuple[str, StreamHandle]]:
        out = []
        for _ in range(self.inp.read_int()):
            local = self.inp.read_utf()
            h = self.stream_handle()
            if h is not None:
                out.append((local, h))
        return out

    def stream_handle(self) -> StreamHandle | None:
        inp = self.inp
        t = inp.read_byte()
        if t == NULL_HANDLE:
            return None
        if t == FILE_STREAM:
            size = inp.read_long()
            return StreamHandle("file", inp.read_utf(), size)
        if t == BYTE_STREAM:
            name = inp.read_utf()
            n = inp.read_int()
            return StreamHandle("bytes", name, n, inp.read_bytes(n))
        if t == RELATIVE_STREAM:
            rel = inp.read_utf()
            return StreamHandle("relative", rel, inp.read_long())
        if t == SEGMENT_FILE:
            start, size = inp.read_long(), inp.read_long()
            inp.read_int()  # scope: 0 exclusive (task-owned), 1 shared
            path = inp.read_utf()
            inp.read_utf()  # logical file id
            if start < 0 or size < 0:
                raise self.fail(f"found a file segment at {start} of {size} bytes, expected both >= 0")
            return StreamHandle("segment", path, size, offset=start)
        if t == EMPTY_SEGMENT_FILE:
            return StreamHandle("bytes", "(empty file segment)", 0, b"")
        if t == KEY_GROUPS:  # a key-groups handle used as a stream: read its delegate
            inp.read_int()  # first key group
            inp.skip(8 * inp.read_int())  # offsets
            return self.stream_handle()
        raise self.fail(f"found stream state handle type {t}, expected one of 0, 1, 2, 6, 15, 16")


def read_metadata(path: Path) -> CheckpointMetadata:
    """Parse a ``_metadata`` file (see module doc); errors name the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotCorruptError(f"{path}: cannot read checkpoint metadata ({exc})") from exc
    return _MetadataParser(path, data).parse()
