"""Flink canonical savepoints, written from an edited canonical savepoint.

What is written is what Flink itself writes for a canonical savepoint (``SavepointFormatType.CANONICAL``),
so that either state backend restores it:

* ``_metadata`` in the input's version (3 to 7, see ``readers.flink.metadata``): its master states (the state of
  master hooks, opaque) byte for byte, the operators kept, each
  under its (possibly new) operator id, uid and max parallelism, with its coordinator state, every
  subtask's operator state (its bytes copied into a file of the new folder) and a
  ``KeyGroupsSavepointStateHandle`` (type 7) whose stream is a ``RelativeFileStateHandle`` (type 6), so
  the folder can be moved; the checkpoint properties copied byte for byte.
* one keyed-state stream per subtask, in the full-snapshot layout (``readers.flink.fullformat``): the
  keyed backend header (``readers.flink.statemeta``) with the kept states' entries copied byte for byte
  and the "compressed" flag cleared (Flink reads the flag of each stream, not its own configuration),
  then every key group of the subtask's range that holds entries, at the offset the handle records
  (0 for none). A key group is its state id, its entries in state order, the last entry of each state
  marked by the top bit of its key's first byte and followed by the next state id or 0xFFFF.

Entries are copied as bytes: a key is its key-group prefix (1 byte up to max parallelism 128, else 2)
and the serialized key, namespace and user key, which are kept; only the prefix is rewritten when keys
move to other key groups. Values are not re-encoded: a filtered list is its kept elements' bytes joined
by the list delimiter. Keys and values are decoded (with the reader's decoders) only where an edit asks
about them.

Memory: an operator's entries stream from the input to the written file, one subtask's key groups read a few
megabytes at a time (by range) and each key group's kept entries held only while it is written, so a write holds
about its largest key group, whatever the operator's size. A new max parallelism gathers keys from any old key
group into a new one, so its entries are held, bucketed by new key group: all at once when the operator fits the
memory budget (``explorer.edit(..., memory_budget=)``), else in consecutive ranges of new key groups that each fit,
one reading of the input per range after a first one that measures every new key group (``filter`` and
``map_values`` functions then see each row twice). What is held is checked against the budget before it is read,
at :data:`HELD_BYTES_PER_BYTE` bytes of memory per byte of state; a key group that alone does not fit is refused
with a ``SnapshotTooLargeError`` naming the ``memory_budget=`` that admits it.

Changed values (``map_values``, ``update``) are encoded by the serializer the state's header declares
(``editing.values``: POJOs by their recorded fields, Rows, Tuples, collections, java.time, TTL values keeping or
setting their last access) and read back before they are written.

``bootstrap`` gives a new operator value, list or map states of String, Long or Integer values (and map keys)
keyed by String or Long keys: a keyed-state header written from scratch (those serializers' snapshots, List and
Map serializer snapshots around them, the void namespace's) and entries encoded as those serializers write them.
``set_operator_state`` sets list (split, union) or broadcast state: per subtask a new operator-state stream and
its handle, holding the states the subtask held and the edit does not set byte for byte (a source's splits),
a replaced state encoded by its own declared serializers, a new one of those simple types.

Refused, with an error saying why: anything but a canonical savepoint's keyed state (native and
incremental snapshots, checkpoints with in-flight data, raw keyed state, file-merging segments), operator state whose serializer snapshots are not parsed, and keys whose Java hash State Explorer cannot reproduce when
``with_max_parallelism`` must move them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EditError, FlinkCorruptError
from ..format import budget
from ..keygroups import assign_to_key_group, key_group_range_for_operator, operator_index_for_key_group
from ..readers.flink.compression import unframe
from ..readers.flink.datainput import DataInput
from ..readers.flink.fullformat import END_OF_KEY_GROUP, iter_entries, key_group_spans
from ..readers.flink.handles import KeyGroupsHandle, OperatorStreamHandle, StreamHandle
from ..readers.flink.metadata import (
    BYTE_STREAM,
    MAGIC,
    NULL_HANDLE,
    OPERATOR_STATE,
    OPERATOR_STATE_MODES,
    RELATIVE_STREAM,
    SAVEPOINT_KEY_GROUPS,
    OperatorState,
    SubtaskState,
)
from ..readers.flink.operatorid import operator_id_for_uid
from ..readers.flink.reader import FlinkSnapshotReader
from ..readers.flink.rows import KeyValueDecoder, RowBuffer, hashable_keys, prefix_bytes
from ..readers.flink.serializers import (
    COMPOSITE_MAGIC,
    NESTED_MAGIC,
    PRIMITIVES,
    Decoder,
    TtlValue,
    UnknownSnapshot,
    read_top_level_snapshot,
)
from ..readers.flink.splits import SOURCE_READER_STATE, decode_split, encode_split
from ..readers.flink.statemeta import BackendMeta
from .dataoutput import DataOutput
from .values import Touched, encode, last_access_ms

if TYPE_CHECKING:
    from .editor import OperatorPlan

_COPYABLE_STREAMS = ("bytes", "relative", "file")


def check_editable(reader: FlinkSnapshotReader) -> None:
    """Refuse, up front, a snapshot this writer cannot write back exactly (see module doc)."""
    meta, where = reader.meta, reader.metadata_file
    for op in meta.operators:
        streams = [op.coordinator]
        for st in op.subtasks:
            name = f"{where}: operator {op.display_name!r}, subtask {st.index}"
            if st.channel_state_handles:
                raise EditError(f"{name}: found in-flight data of an unaligned checkpoint; expected a savepoint")
            if st.raw_keyed is not None:
                raise EditError(f"{name}: found raw keyed state, which explorer.edit does not write; expected none")
            h = st.managed_keyed
            if h is not None and not (isinstance(h, KeyGroupsHandle) and (h.savepoint or meta.savepoint_format == "CANONICAL")):
                raise EditError(f"{name}: found a {type(h).__name__} (a native savepoint or a checkpoint); "
                                "explorer.edit reads canonical savepoints: take one with "
                                "'flink savepoint --type canonical'")
            streams += [oh.stream for oh in (st.managed_operator, st.raw_operator) if oh is not None]
        for s in streams:
            if s is not None and s.kind not in _COPYABLE_STREAMS:
                raise EditError(f"{where}: operator {op.display_name!r} has state in a {s.kind} handle "
                                f"({s.name}); expected a savepoint's files or inline bytes")


def _keyed_subtasks(op: OperatorState) -> list[SubtaskState]:
    return [st for st in op.subtasks if not st.finished and st.managed_keyed is not None]


def state_names(reader: FlinkSnapshotReader, op: OperatorState) -> list[str]:
    """The operator's keyed states (timers included), as its headers name them, in order."""
    names: list[str] = []
    for st in _keyed_subtasks(op):
        names += [s.name for s in reader.keyed_header(op, st).states if s.name not in names]
    return names


def hashable_key(k: Any) -> Any:
    """A key as edits compare it: Tuple and Row keys (dicts or lists as the reader shows them) as tuples."""
    if isinstance(k, dict):
        return tuple(hashable_key(v) for v in k.values())
    if isinstance(k, list):
        return tuple(hashable_key(v) for v in k)
    return k


#: bytes of memory one byte of keyed state takes once its entries are held as Python objects (key and value bytes
#: objects, a tuple each, the lists of a key group): the edit benchmark measured 5.4 bytes of peak RSS per byte of a
#: 991 MB savepoint while whole operators were held (issue 32); what a write must hold is checked at this rate
HELD_BYTES_PER_BYTE = 6
#: key groups of one subtask are read together up to this many bytes (a larger key group is read alone, whole)
READ_CHUNK = 8 << 20


class _OperatorEntries:
    """The kept entries of one operator, and the header they need, written one subtask's keyed stream at a time.

    When the edit keeps every key in its key group (no new max parallelism) and each subtask's handle covers the key
    groups Flink assigns that subtask, entries stream: a subtask's key groups are read a few megabytes at a time, each
    key group's kept entries go to the written file, and only they are held (:meth:`write_stream`), so memory is
    bounded by the largest key group, not the operator. Moving keys to other key groups takes every entry of the
    operator at once (a key group of the new max parallelism gathers keys from any old one): then they are held,
    bucketed by their new key group, once the budget admits them. Either way what is held is checked against the
    memory budget (:data:`HELD_BYTES_PER_BYTE` per byte of state) before it is read."""

    def __init__(self, reader: FlinkSnapshotReader, plan: OperatorPlan) -> None:
        self.reader, self.plan, self.op = reader, plan, plan.source
        self.where = f"{reader.metadata_file}: operator {self.op.display_name!r}"
        self.header_start = b""
        self.states: list[tuple[str, bytes]] = []  # (name, the state's entry in the header)
        self.buckets: dict[int, list[tuple[int, bytes, bytes]]] = defaultdict(list)
        self.entries_in = self.entries_out = 0
        #: subtask index -> (subtask, its header, input state id -> output state id)
        self.inputs: dict[int, tuple[SubtaskState, BackendMeta, dict[int, int]]] = {}
        for st in _keyed_subtasks(self.op):
            self._header(st)
        op, p = self.op, self.op.parallelism
        # (a new parallelism gives the written subtasks other key-group ranges than the read ones: held, by range)
        self.streaming = plan.max_parallelism == op.max_parallelism and (plan.parallelism or p) == p and all(
            _covers(st, key_group_range_for_operator(op.max_parallelism, p, st.index)) for st, _, _ in self.inputs.values())
        #: the new key groups held in :attr:`buckets` (first, last); passes: the ranges held one after the other
        self.loaded: tuple[int, int] = (-1, -1)
        self.passes: list[tuple[int, int]] = []
        if not self.streaming:
            self._plan_passes()
            self._load(self.passes[0])
        self.nonempty = set(self.buckets) if len(self.passes) <= 1 else self.nonempty

    def _plan_passes(self) -> None:
        """The ranges of new key groups to hold one after the other: all at once when the operator's state fits the
        budget, else as many as the budget admits at a time, from a first pass that measures each new key group
        (and refuses one that alone does not fit)."""
        new_p = self.plan.max_parallelism
        held = sum(self._stream_size(st) for st, _, _ in self.inputs.values())
        limit = budget.current()
        if limit is None or held * HELD_BYTES_PER_BYTE <= limit:
            self.passes = [(0, new_p - 1)]
            return
        sizes: dict[int, int] = defaultdict(int)
        for index in self.inputs:
            for _, entries in self._chunks(index):
                for new_kg, _, key, value in entries:
                    sizes[new_kg] += len(key) + len(value) + 8
        self.nonempty = set(sizes)
        cap = max(limit // HELD_BYTES_PER_BYTE - READ_CHUNK, 1)
        first, acc = 0, 0
        for kg in sorted(sizes):
            budget.check(sizes[kg] * HELD_BYTES_PER_BYTE, file=self.where,
                         what=f"key group {kg} of max parallelism {new_p} ({sizes[kg]:,} bytes of state gathered from "
                              f"the old key groups, held at {HELD_BYTES_PER_BYTE} bytes of memory each while written)")
            if acc and acc + sizes[kg] > cap:
                self.passes.append((first, kg - 1))
                first, acc = kg, 0
            acc += sizes[kg]
        self.passes.append((first, new_p - 1))

    def _load(self, wanted: tuple[int, int]) -> None:
        """Hold the kept entries whose new key group is in ``wanted`` (a range), bucketed by it, reading every
        subtask's stream a chunk of key groups at a time."""
        self.buckets = defaultdict(list)
        for index in self.inputs:
            for _, entries in self._chunks(index, wanted):
                for new_kg, sid, key, value in entries:
                    self.buckets[new_kg].append((sid, key, value))
        self.loaded = wanted

    def _held(self, first_kg: int, last_kg: int):
        """(key group, its kept entries) of the new key groups ``first_kg``..``last_kg`` (ascending, as subtasks are
        written), from the pass holding each."""
        for kg in range(first_kg, last_kg + 1):
            if kg > self.loaded[1]:
                self._load(next(r for r in self.passes if r[0] <= kg <= r[1]))
            yield kg, self.buckets.get(kg, ())

    def _header(self, st: SubtaskState) -> None:
        """One subtask's keyed-state header: its states joined to the operator's (in order), its state ids mapped."""
        h = st.managed_keyed
        header = self.reader.keyed_header(self.op, st)
        if h.stream is None or header.states_at is None or header.version < 2:
            raise EditError(f"{self.where}, subtask {st.index}: found a keyed-state header of version "
                            f"{header.version} without a stream or state list; expected version 2 or later")
        raw = self.reader.resolver.read(h.stream, header.end)  # (the header is never compressed)
        if not self.header_start:  # version, "not compressed", the key serializer's snapshot
            self.header_start = raw[:4] + b"\x00" + raw[5 : header.states_at]
        out_ids = {}
        known = [n for n, _ in self.states]
        for s in header.states:
            if s.name in self.plan.dropped_states:
                continue
            if s.name not in known:
                self.states.append((s.name, raw[s.span[0] : s.span[1]]))
                known.append(s.name)
            out_ids[s.state_id] = known.index(s.name)
        self.inputs[st.index] = (st, header, out_ids)

    def _stream_size(self, st: SubtaskState) -> int:
        h = st.managed_keyed.stream
        if h.kind == "bytes":
            return len(h.data or b"")
        return h.size if h.size >= 0 else self.reader.resolver.local_path(h).stat().st_size

    def _kept(self, st: SubtaskState, header: BackendMeta, out_ids: dict[int, int], data: bytes,
              span: tuple[int, int, int], decoders: dict[int, KeyValueDecoder], wanted: tuple[int, int] | None = None):
        """(new key group, output state id, key without its key-group prefix, value) of each entry of one key group
        that the edits keep, in the stream's order, values filtered and mapped (``wanted``: only entries whose new
        key group is in that range, left out before the filters and functions see them)."""
        plan = self.plan
        old_p, new_p = self.op.max_parallelism, plan.max_parallelism
        prefix = prefix_bytes(old_p)
        kg = span[0]
        for sid, key, value in iter_entries(data, span, header.compressed):
            self.entries_in += 1
            if sid >= len(header.states):
                raise FlinkCorruptError(f"{self.where}, subtask {st.index}, key group {kg}: found state id {sid}, "
                                        f"expected one of the header's {len(header.states)}")
            if sid not in out_ids:
                continue
            if int.from_bytes(key[:prefix], "big") != kg:
                raise FlinkCorruptError(f"{self.where}, key group {kg}: an entry's key starts with key group "
                                        f"{int.from_bytes(key[:prefix], 'big')}; expected {kg}")
            meta = header.states[sid]
            dec = decoders.get(sid)
            if dec is None:
                dec = decoders[sid] = KeyValueDecoder(meta, header.key_decoder, old_p)
            new_kg = kg
            if plan.dropped_keys or new_p != old_p:
                k = _key_of(dec, key)
                if any(hashable_key(k) in keys for keys in plan.dropped_keys):
                    continue
                if new_p != old_p:
                    new_kg = self._new_key_group(header, k, kg, old_p, new_p)
            if wanted is not None and not wanted[0] <= new_kg <= wanted[1]:
                continue
            preds = plan.filters.get(meta.name)
            if preds:
                value = self._filtered(dec, meta, kg, key, value, preds)
                if value is None:
                    continue
            fns = plan.mappers.get(meta.name)
            if fns:
                value = self._mapped(dec, meta, kg, key, value, fns)
            self.entries_out += 1
            yield new_kg, out_ids[sid], key[prefix:], value

    def _chunks(self, index: int, wanted: tuple[int, int] | None = None):
        """(key group, its kept entries as :meth:`_kept` gives them) of input subtask ``index``'s key groups, read a
        chunk of key groups at a time."""
        if index not in self.inputs:
            return
        st, header, out_ids = self.inputs[index]
        h = st.managed_keyed
        spans = key_group_spans(h.offsets, h.start, header.end, self._stream_size(st))
        decoders: dict[int, KeyValueDecoder] = {}
        batch: list[tuple[int, int, int]] = []
        for i, span in enumerate(spans):
            batch.append(span)
            size = sum(e - b for _, b, e in batch)
            if i + 1 < len(spans) and size + spans[i + 1][2] - spans[i + 1][1] <= READ_CHUNK:
                continue
            biggest = max(batch, key=lambda s: s[2] - s[1])
            budget.check(size + (biggest[2] - biggest[1]) * HELD_BYTES_PER_BYTE, file=self.where,
                         what=f"key group {biggest[0]} of subtask {index} ({biggest[2] - biggest[1]:,} bytes of "
                              f"state, held as entries at {HELD_BYTES_PER_BYTE} bytes of memory each while it is "
                              f"written, beside the {size:,} bytes read with it)")
            data, got = self.reader.resolver.read_key_groups(h.stream, h.offsets, h.start, header.end,
                                                            frozenset(s[0] for s in batch))
            for span_in in got:
                yield span_in[0], list(self._kept(st, header, out_ids, data, span_in, decoders, wanted))
            del data
            batch = []

    def _new_key_group(self, header: BackendMeta, key: Any, kg: int, old_p: int, new_p: int) -> int:
        hk = hashable_keys(header.key_decoder, [key])
        if hk is None:
            raise EditError(f"{self.where}: keys are {header.key_decoder.describe()}, whose Java hashCode State "
                            f"Explorer does not reproduce; cannot move them to the key groups of max parallelism "
                            f"{new_p} (expected String, boxed primitive, Tuple or Row keys of those)")
        if assign_to_key_group(hk[0], old_p) != kg:
            raise EditError(f"{self.where}: key {key!r} is in key group {kg} of the savepoint, but its Java hash "
                            f"puts it in key group {assign_to_key_group(hk[0], old_p)}; refusing to move keys "
                            "whose hash is not reproduced exactly")
        return assign_to_key_group(hk[0], new_p)

    def _filtered(self, dec: KeyValueDecoder, meta, kg: int, key: bytes, value: bytes, preds) -> bytes | None:
        buf = RowBuffer(meta)
        dec.decode(buf, kg, key, value)
        if buf.raw_notes or meta.is_pyflink_bag:
            raise EditError(f"{self.where}: state {meta.name!r} has values State Explorer does not decode "
                            f"({buf.raw_reason or 'PyFlink records'}); filter() needs decoded values")
        keep = [all(p({"key": k, "namespace": n, "user_key": u, "value": v, "last_access": t}) for p in preds)
                for k, n, u, v, t in zip(buf.keys, buf.namespaces, buf.user_keys, buf.values, buf.last_access)]
        if dec.kind != "list" or dec.timer is not None:
            return value if all(keep) else None
        if all(keep):
            return value
        parts, p = [], 0
        for size, kept in zip(buf.sizes, keep):
            if kept:
                parts.append(value[p : p + size])
            p += size + 1  # the element and its delimiter
        if p - 1 != len(value):
            raise FlinkCorruptError(f"{self.where}: a list value of state {meta.name!r} in key group {kg} has "
                                    f"{len(value)} bytes; its elements account for {p - 1}")
        return b",".join(parts) or None

    def _rows(self, dec: KeyValueDecoder, meta, kg: int, key: bytes, value: bytes, what: str) -> list[dict]:
        buf = RowBuffer(meta)
        dec.decode(buf, kg, key, value)
        if buf.raw_notes or meta.is_pyflink_bag or dec.timer is not None:
            raise EditError(f"{self.where}: state {meta.name!r} has values State Explorer does not decode "
                            f"({buf.raw_reason or 'PyFlink records or timers'}); {what} needs decoded values")
        return [{"key": k, "namespace": n, "user_key": u, "value": v, "last_access": t}
                for k, n, u, v, t in zip(buf.keys, buf.namespaces, buf.user_keys, buf.values, buf.last_access)]

    def _mapped(self, dec: KeyValueDecoder, meta, kg: int, key: bytes, value: bytes, fns) -> bytes:
        rows = self._rows(dec, meta, kg, key, value, "map_values/update")
        ttl = meta.has_ttl
        for row in rows:
            for fn in fns:
                new = fn(dict(row))
                if isinstance(new, Touched):
                    if not ttl:
                        raise EditError(f"{self.where}: state {meta.name!r} has no TTL; last_access= is for states "
                                        "with a time-to-live")
                    row["last_access"] = last_access_ms(new.last_access, f"{self.where}, state {meta.name!r}")
                    new = new.value
                row["value"] = new
        where = f"{self.where}, state {meta.name!r}, key {rows[0]['key']!r}" if rows else self.where

        def enc(row: dict) -> bytes:  # (a TTL state's value keeps its last access unless an edit set it)
            v = TtlValue(row["last_access"], row["value"]) if ttl else row["value"]
            return encode(dec.elem, v, where)

        if dec.kind == "list":
            if any(r["value"] is None for r in rows):
                raise EditError(f"{where}: found None as a new list element; to leave elements out use filter()")
            return b",".join(enc(r) for r in rows)
        new = rows[0]["value"]
        if dec.kind == "map":
            return b"\x01" if new is None else b"\x00" + enc(rows[0])
        if new is None:
            raise EditError(f"{where}: found None as a new value; to leave rows out use filter()")
        return enc(rows[0])

    def header(self) -> bytes:
        out = DataOutput()
        out.write_bytes(self.header_start)
        out.write_short(len(self.states))
        for _, raw in self.states:
            out.write_bytes(raw)
        return bytes(out.buf)

    def write_stream(self, w: _Writer, name: str, index: int, first_kg: int, last_kg: int
                     ) -> tuple[StreamHandle, list[int]]:
        """The full-snapshot stream of subtask ``index``, owning key groups ``first_kg``..``last_kg``, written into
        file ``name`` a key group at a time; its handle and offsets."""
        offsets = [0] * (last_kg - first_kg + 1)
        prefix = prefix_bytes(self.plan.max_parallelism)
        if self.streaming:  # (each key group in its own subtask: _covers)
            groups = ((kg, [e[1:] for e in entries]) for kg, entries in self._chunks(index))
        else:
            groups = self._held(first_kg, last_kg)
        with w.open(name) as fh:
            fh.write(self.header())
            for kg, entries in groups:
                entries = sorted(entries, key=lambda e: e[0])  # (stable: each state's order kept)
                if not entries:
                    continue
                offsets[kg - first_kg] = fh.tell()
                out = DataOutput()
                out.write_short(entries[0][0])
                for i, (sid, key, value) in enumerate(entries):
                    nxt = entries[i + 1][0] if i + 1 < len(entries) else END_OF_KEY_GROUP
                    full = bytearray(kg.to_bytes(prefix, "big") + key)
                    if nxt != sid:
                        full[0] |= 0x80  # the state's last entry in this key group: a state id follows
                    out.write_int(len(full))
                    out.write_bytes(full)
                    out.write_int(len(value))
                    out.write_bytes(value)
                    if nxt != sid:
                        out.write_short(nxt)
                fh.write(out.buf)
            size = fh.tell()
        return StreamHandle("relative", name, size), offsets


def _covers(st: SubtaskState, rng) -> bool:
    """Whether the subtask's key-groups handle holds exactly the key groups Flink assigns the subtask."""
    h = st.managed_keyed
    return h.start == rng.start and len(h.offsets) == rng.end - rng.start + 1


def _key_of(dec: KeyValueDecoder, key: bytes) -> Any:
    inp = DataInput(key, dec.prefix)
    if dec.timer is not None:
        return dec.timer.read(inp)[1]
    return dec.key_decoder.read(inp)


class _Writer:
    """Writes the savepoint's files into ``out`` and remembers each, so a failure removes only them."""

    def __init__(self, reader: FlinkSnapshotReader, out: Path) -> None:
        self.reader, self.out = reader, out
        self.written: list[Path] = []

    def file(self, name: str, data: bytes) -> StreamHandle:
        path = self.out / name
        with path.open("xb") as fh:  # never over a file that is there
            self.written.append(path)
            fh.write(data)
        return StreamHandle("relative", name, len(data))

    def open(self, name: str):
        """A new file ``name`` to write into (a file object), removed with the others on a failure."""
        path = self.out / name
        fh = path.open("xb")  # never over a file that is there
        self.written.append(path)
        return fh

    def copy(self, h: StreamHandle | None, name: str) -> StreamHandle | None:
        if h is None or h.kind == "bytes":
            return h
        return self.file(name, self.reader.resolver.read(h))


def write_savepoint(reader: FlinkSnapshotReader, plans: list[OperatorPlan], out: Path) -> Path:
    """Write the savepoint the plans describe into ``out`` (see module doc); returns ``out``."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EditError(f"{out}: found an existing {'folder that is not empty' if out.is_dir() else 'file'}; "
                        "expected a new or empty folder for the edited savepoint")
    if out.resolve() == reader.metadata_file.parent.resolve():
        raise EditError(f"{out}: is the input savepoint's folder; expected another one")
    created = not out.exists()
    out.mkdir(exist_ok=True)
    w = _Writer(reader, out)
    try:
        meta = reader.meta
        d = DataOutput()
        d.write_int(MAGIC)
        d.write_int(meta.version)
        d.write_long(meta.checkpoint_id)
        d.write_int(meta.master_states)  # master states (a master hook's state), kept byte for byte
        d.write_bytes(meta.master_states_bytes)
        kept = [p for p in plans if not p.dropped]
        d.write_int(len(kept))
        for plan in kept:
            _write_operator(d, w, reader, plan)
        if meta.properties_bytes is not None:
            d.write_bytes(meta.properties_bytes)
        w.file("_metadata", bytes(d.buf))
    except BaseException:
        for path in reversed(w.written):
            path.unlink(missing_ok=True)
        if created:
            out.rmdir()
        raise
    return out


def _write_operator(d: DataOutput, w: _Writer, reader: FlinkSnapshotReader, plan: OperatorPlan) -> None:
    op, version = plan.source, reader.meta.version
    p, max_p = plan.parallelism or op.parallelism, plan.max_parallelism
    if version >= 5:
        d.write_utf(plan.name or "")
        d.write_utf(plan.uid or "")
    raw_id = bytes.fromhex(plan.operator_id)
    d.write_long(int.from_bytes(raw_id[:8], "big", signed=True))
    d.write_long(int.from_bytes(raw_id[8:], "big", signed=True))
    d.write_int(p)
    d.write_int(max_p)
    _stream(d, w.copy(op.coordinator, f"{plan.operator_id}-coordinator"))
    if op.fully_finished:
        d.write_int(-1)
        return
    subtasks = {st.index: st for st in op.subtasks}
    #: subtask -> the operator state handles of subtasks past a new, lower parallelism it takes (index % p):
    #: Flink redistributes list state over all handles on restore, and a subtask may hold several
    folded: dict[int, list[SubtaskState]] = {}
    if p != op.parallelism:
        where = f"{reader.metadata_file}: operator {plan.uid or plan.operator_id!r}"
        if any(st.finished for st in op.subtasks):
            raise EditError(f"{where}: has finished subtasks; with_parallelism({p}) cannot split a finished operator")
        if plan.operator_states and any(st.managed_operator is not None for st in op.subtasks if st.index >= p):
            raise EditError(f"{where}: set_operator_state() beside operator state held past parallelism {p}; "
                            "expected one or the other")
        for i in [i for i in subtasks if i >= p]:
            st = subtasks.pop(i)
            if st.managed_operator is not None or st.raw_operator is not None:
                folded.setdefault(i % p, []).append(st)
                subtasks.setdefault(i % p, SubtaskState(i % p))
    keyed = _OperatorEntries(reader, plan) if _keyed_subtasks(op) else \
        _BootstrapEntries(reader, plan) if plan.bootstrapped else None
    if keyed is not None:  # a subtask that had no state may own key groups now
        for kg in keyed.nonempty:
            i = operator_index_for_key_group(max_p, p, kg)
            subtasks.setdefault(i, SubtaskState(i))
    if plan.operator_states:  # every subtask gets its share (or its copy)
        for i in range(p):
            subtasks.setdefault(i, SubtaskState(i))
    d.write_int(len(subtasks))
    for i in sorted(subtasks):
        st = subtasks[i]
        if st.finished:
            d.write_int(-i - 1)
            continue
        d.write_int(i)
        managed = st.managed_operator
        if plan.operator_states:  # the states the subtask holds, kept or replaced, and the new ones
            held = _held(reader, plan.source, i) if st.managed_operator is not None else None
            data, states = _operator_state_stream(plan, i, held)
            managed = OperatorStreamHandle(states, w.file(f"{plan.operator_id}-{i}-operator-new", data))
        for what, oh in (("operator", managed), ("raw-operator", st.raw_operator)):
            more = [(f.index, h) for f in folded.get(i, ())
                    if (h := (f.managed_operator if what == "operator" else f.raw_operator)) is not None]
            d.write_int((oh is not None) + len(more))
            if oh is not None:
                _operator_handle(d, oh, oh.stream if oh is not st.managed_operator and what == "operator"
                                 else w.copy(oh.stream, f"{plan.operator_id}-{i}-{what}"))
            for j, h in more:  # a subtask past the new parallelism: its handle beside this one's
                _operator_handle(d, h, w.copy(h.stream, f"{plan.operator_id}-{j}-{what}"))
        if keyed is None:
            d.write_byte(NULL_HANDLE)
        else:
            rng = key_group_range_for_operator(max_p, p, i)
            h, offsets = keyed.write_stream(w, f"{plan.operator_id}-{i}-keyed", i, rng.start, rng.end)
            d.write_byte(SAVEPOINT_KEY_GROUPS)
            d.write_int(rng.start)
            d.write_int(len(offsets))
            for off in offsets:
                d.write_long(off)
            _stream(d, h)
        d.write_byte(NULL_HANDLE)  # raw keyed state (check_editable: none)
        d.write_int(0)  # input channel state
        d.write_int(0)  # result subpartition state
        if version >= 7:
            d.write_byte(0)  # no reference checkpoint id
    for state, key, user_key, hits in plan.updates:  # (counted while the keyed streams were written)
        if not hits:
            at = f", user key {user_key!r}" if user_key is not None else ""
            raise EditError(f"{reader.metadata_file}: operator {plan.uid or plan.operator_id!r}, state {state!r} "
                            f"has no row of key {key!r}{at} to update (adding state is not an edit of this kind)")


def _operator_handle(d: DataOutput, oh: OperatorStreamHandle, stream: StreamHandle | None) -> None:
    d.write_byte(OPERATOR_STATE)
    d.write_int(len(oh.states))
    for name, (mode, offsets) in oh.states.items():
        if mode not in OPERATOR_STATE_MODES:
            raise EditError(f"operator state {name!r}: found distribution mode {mode}; expected one of "
                            f"{', '.join(OPERATOR_STATE_MODES)}")
        d.write_utf(name)
        d.write_byte(OPERATOR_STATE_MODES.index(mode))
        d.write_int(len(offsets))
        for off in offsets:
            d.write_long(off)
    _stream(d, stream)


def _stream(d: DataOutput, h: StreamHandle | None) -> None:
    if h is None:
        d.write_byte(NULL_HANDLE)
    elif h.kind == "bytes":
        d.write_byte(BYTE_STREAM)
        d.write_utf(h.name)
        d.write_int(len(h.data or b""))
        d.write_bytes(h.data or b"")
    elif h.kind == "relative":
        d.write_byte(RELATIVE_STREAM)
        d.write_utf(h.name)
        d.write_long(h.size)
    else:  # (copy() made every file a relative one)
        raise EditError(f"cannot write a {h.kind} stream handle ({h.name}) into a savepoint")


_FLINK_MODES = {"split": "SPLIT_DISTRIBUTE", "union": "UNION", "broadcast": "BROADCAST"}


def _meta_info(name: str, backend_type: int, mode: str, serializers: list[tuple[str, str]]) -> bytes:
    """One operator (1) or broadcast (2) state's entry of the operator-state header."""
    d = DataOutput()
    d.write_utf(name)
    d.write_int(backend_type)
    d.write_int(1)
    d.write_utf("OPERATOR_STATE_DISTRIBUTION_MODE")
    d.write_utf(mode)
    d.write_int(len(serializers))
    for key, kind in serializers:
        d.write_utf(key)
        d.write_bytes(_serializer_snapshot(kind))
    return bytes(d.buf)


class _HeldOperatorState:
    """One subtask's operator-state stream as held: the header's version, each state's meta-info bytes (as written)
    and decoders, and each state's elements (or a broadcast state's payload) as bytes, uncompressed."""

    def __init__(self, reader: FlinkSnapshotReader, op: OperatorState, st: SubtaskState) -> None:
        h = st.managed_operator
        where = f"{reader.metadata_file}: operator {op.display_name!r}, subtask {st.index}"
        data = reader.resolver.read(h.stream) if h.stream is not None else b""
        inp = DataInput(data)
        self.metas: dict[str, tuple[bool, bytes, dict[str, Decoder]]] = {}
        try:
            version = inp.read_int()
            if version != 6:
                raise EditError(f"{where}: found an operator-state header of version {version}; expected 6 "
                                "(Flink 1.15 to 2.x), the one set_operator_state writes next to held state")
            compressed = inp.read_bool()
            for broadcast in (False, True):
                for _ in range(inp.read_short()):
                    start = inp.pos
                    name = inp.read_utf()
                    inp.read_int()
                    for _ in range(inp.read_int()):
                        inp.read_utf()
                        inp.read_utf()
                    sers = {}
                    for _ in range(inp.read_int()):
                        key = inp.read_utf()
                        sers[key] = read_top_level_snapshot(inp)
                    self.metas[name] = (broadcast, bytes(data[start : inp.pos]), sers)
        except UnknownSnapshot as exc:
            raise EditError(f"{where}: operator state uses serializer {exc.class_name}, which State Explorer does "
                            "not parse; its header cannot be rewritten") from exc
        except EOFError as exc:
            raise FlinkCorruptError(f"{where}: the operator-state header ends early ({exc})") from exc
        starts = sorted({o for _, offs in h.states.values() for o in offs})
        ends = {o: (starts[i + 1] if i + 1 < len(starts) else len(data)) for i, o in enumerate(starts)}
        self.elements: dict[str, tuple[str, list[bytes]]] = {}
        for name, (mode, offsets) in h.states.items():
            if any(not inp.pos <= o <= len(data) for o in offsets):
                raise FlinkCorruptError(f"{where}: operator state {name!r} has an offset outside the "
                                        f"{len(data)}-byte stream's data (after its {inp.pos}-byte header)")
            parts = [unframe(data, o, ends[o]) if compressed else bytes(data[o : ends[o]]) for o in offsets]
            self.elements[name] = (mode, parts)


def _held(reader: FlinkSnapshotReader, op: OperatorState, index: int | None = None) -> _HeldOperatorState | None:
    """The operator state subtask ``index`` holds (None: the first subtask holding any), or None."""
    st = next((st for st in op.subtasks if st.managed_operator is not None and index in (None, st.index)), None)
    return None if st is None else _HeldOperatorState(reader, op, st)


def operator_state_spec(reader: FlinkSnapshotReader, plan: OperatorPlan, name: str, values: Any, mode: str,
                        value_type: Any = None, key_type: Any = None) -> dict:
    """Check one ``set_operator_state`` on a Flink savepoint. A state the operator holds is replaced, keeping its
    declared serializers and mode (its values encoded by them); a new one is a state of String, Long or Integer
    values (and keys). The operator's other operator states (a source's splits, say) are kept byte for byte."""
    where = f"{reader.metadata_file}: operator {plan.uid or plan.operator_id!r}, operator state {name!r}"
    if mode not in _FLINK_MODES:
        raise EditError(f"{where}: found mode {mode!r}; expected one of {', '.join(_FLINK_MODES)}")
    held = _held(reader, plan.source)
    meta = held.metas.get(name) if held is not None else None
    if meta is not None:
        was = held.elements.get(name, (None,))[0]
        if was is not None and was != _FLINK_MODES[mode]:
            raise EditError(f"{where}: the operator holds it with mode {was}; found mode {mode!r} (a state keeps "
                            "its distribution mode)")
    p = plan.parallelism or plan.source.parallelism
    if mode == "broadcast":
        if not isinstance(values, dict):
            raise EditError(f"{where}: broadcast state takes a dict of entries; found {type(values).__name__}")
        if meta is not None:
            kdec, vdec, info = meta[2].get("KEY_SERIALIZER"), meta[2].get("VALUE_SERIALIZER"), meta[1]
        else:
            kk = _simple_kind(list(values), key_type, "key", where)
            vk = _simple_kind(list(values.values()), value_type, "value", where)
            kdec, vdec = _Simple(kk), _Simple(vk)
            info = _meta_info(name, 2, "BROADCAST", [("KEY_SERIALIZER", kk), ("VALUE_SERIALIZER", vk)])
        data = DataOutput()
        data.write_int(len(values))
        for k, v in values.items():
            data.write_bytes(encode(kdec, k, f"{where}, key {k!r}"))
            data.write_bytes(encode(vdec, v, f"{where}, key {k!r}"))
        return {"broadcast": True, "info": info, "mode": "BROADCAST",
                "per_subtask": {i: [bytes(data.buf)] for i in range(p)}}  # a copy on every subtask
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise EditError(f"{where}: {mode} list state takes a list of values; found {type(values).__name__}")
    values = list(values)
    if meta is not None:
        vdec, info = meta[2].get("VALUE_SERIALIZER"), meta[1]
        if name == SOURCE_READER_STATE:  # splits as the reader shows them: back to their serializer's bytes
            values = [_split_bytes(v, f"{where}, element {i}") if isinstance(v, dict) else v
                      for i, v in enumerate(values)]
    else:
        vk = _simple_kind(values, value_type, "value", where)
        vdec, info = _Simple(vk), _meta_info(name, 1, _FLINK_MODES[mode], [("VALUE_SERIALIZER", vk)])
    elems = [encode(vdec, v, f"{where}, element {i}") for i, v in enumerate(values)]
    base, extra = divmod(len(elems), p)
    per, pos = {}, 0
    for i in range(p):  # an even split, in order (union: each its share, which a restore joins again)
        n = base + (1 if i < extra else 0)
        per[i] = elems[pos : pos + n]
        pos += n
    return {"broadcast": False, "info": info, "mode": _FLINK_MODES[mode], "per_subtask": per}


def _split_bytes(split: dict, where: str) -> bytes:
    """A source split (a dict as ``operator_state()`` shows it) as its ``SourceReaderState`` element, or EditError."""
    try:
        data = encode_split(split)
    except (ValueError, KeyError, OverflowError) as exc:
        raise EditError(f"{where}: cannot write the split {split!r} ({exc})") from exc
    back, why = decode_split(data)
    want = {**split, "serializer_version": back.get("serializer_version") if isinstance(back, dict) else None}
    if why or back != want:
        raise EditError(f"{where}: the split {split!r} would be read back as {back!r}; not written")
    return data


def _operator_state_stream(plan: OperatorPlan, index: int, held: _HeldOperatorState | None
                           ) -> tuple[bytes, dict[str, tuple[str, list[int]]]]:
    """One subtask's operator-state stream (header, then every element, uncompressed) and the handle's state map:
    the states the subtask held that the edits do not set, as they were, then the ones the edits set."""
    specs = dict(plan.operator_states)
    kept = {} if held is None else {n: m for n, m in held.metas.items() if n not in specs}
    d = DataOutput()
    d.write_int(6)  # the operator backend header's version (Flink 1.15 .. 2.x)
    d.write_byte(0)  # not compressed
    for broadcast in (False, True):
        infos = [m[1] for m in kept.values() if m[0] is broadcast]
        infos += [spec["info"] for spec in specs.values() if spec["broadcast"] is broadcast]
        d.write_short(len(infos))
        for info in infos:
            d.write_bytes(info)
    states = {}
    for name in kept:
        if name not in held.elements:  # registered, without elements on this subtask
            continue
        mode, parts = held.elements[name]
        offsets = []
        for part in parts:
            offsets.append(len(d.buf))
            d.write_bytes(part)
        states[name] = (mode, offsets)
    for broadcast in (False, True):
        for name, spec in specs.items():
            if spec["broadcast"] is not broadcast:
                continue
            offsets = []
            for part in spec["per_subtask"][index]:
                offsets.append(len(d.buf))
                d.write_bytes(part)
            states[name] = (spec["mode"], offsets)
    return bytes(d.buf), states


# -- bootstrapping new keyed state (value, list and map states of String, Long and Integer) -------------------------------
_SIMPLE = {"String": "String", "Long": "Long", "Integer": "Int"}  # the type -> its serializer's class prefix
_SERIALIZER_SNAPSHOT_FORMAT = 2  # what precedes a snapshot's class name in Flink's headers (as the fixtures hold)
_SIMPLE_SNAPSHOT_VERSION = 3


def _serializer_snapshot(kind: str, nested: bool = False) -> bytes:
    """The snapshot of the serializer of ``kind`` (String, Long, Integer) as a keyed-state header holds it (``nested``:
    inside a composite snapshot, where no format number precedes the class name)."""
    d = DataOutput()
    if not nested:
        d.write_int(_SERIALIZER_SNAPSHOT_FORMAT)
    p = _SIMPLE[kind]
    d.write_utf(f"org.apache.flink.api.common.typeutils.base.{p}Serializer${p}SerializerSnapshot")
    d.write_int(_SIMPLE_SNAPSHOT_VERSION)
    return bytes(d.buf)


def _composite_snapshot(cls: str, kinds: list[str]) -> bytes:
    """A ``ListSerializerSnapshot``/``MapSerializerSnapshot`` of simple element types, as Flink writes it: the class
    and version, the composite magic and outer version 1, the nested-snapshots magic, version 1, count and each."""
    d = DataOutput()
    d.write_int(_SERIALIZER_SNAPSHOT_FORMAT)
    d.write_utf(f"org.apache.flink.api.common.typeutils.base.{cls}")
    d.write_int(_SIMPLE_SNAPSHOT_VERSION)
    d.write_int(COMPOSITE_MAGIC)
    d.write_int(1)
    d.write_int(NESTED_MAGIC)
    d.write_int(1)
    d.write_int(len(kinds))
    for k in kinds:
        d.write_bytes(_serializer_snapshot(k, nested=True))
    return bytes(d.buf)


_VOID_NAMESPACE = ("org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot")
_KEYED_TYPES = {"value": "VALUE", "list": "LIST", "map": "MAP"}


def _state_entry(name: str, kind: str, value_kind: str, user_key_kind: str | None = None) -> bytes:
    """One keyed state's entry of the header: name, type, options, value and namespace serializer snapshots (a list
    state's value serializer is a ListSerializer of its elements', a map state's a MapSerializer)."""
    d = DataOutput()
    d.write_utf(name)
    d.write_int(0)  # a keyed (key/value) state
    d.write_int(1)
    d.write_utf("KEYED_STATE_TYPE")
    d.write_utf(_KEYED_TYPES[kind])
    d.write_int(2)
    d.write_utf("VALUE_SERIALIZER")
    if kind == "list":
        d.write_bytes(_composite_snapshot("ListSerializerSnapshot", [value_kind]))
    elif kind == "map":
        d.write_bytes(_composite_snapshot("MapSerializerSnapshot", [user_key_kind, value_kind]))
    else:
        d.write_bytes(_serializer_snapshot(value_kind))
    d.write_utf("NAMESPACE_SERIALIZER")
    d.write_int(_SERIALIZER_SNAPSHOT_FORMAT)
    d.write_utf(_VOID_NAMESPACE)
    d.write_int(_SIMPLE_SNAPSHOT_VERSION)
    return bytes(d.buf)


def _Simple(kind: str) -> Decoder:
    """The reader's decoder of one simple type (String, Long, Integer), which ``values.encode`` writes by."""
    return PRIMITIVES[{"String": "StringSerializer", "Long": "LongSerializer", "Integer": "IntSerializer"}[kind]]


def _simple_kind(values: list, given: Any, what: str, where: str) -> str:
    names = {str: "String", int: "Long", "String": "String", "Long": "Long", "Integer": "Integer"}
    if given is not None:
        if given not in names:
            raise EditError(f"{where}: {what} type {given!r}; a Flink savepoint is bootstrapped with String, Long "
                            "or Integer (str, int) values")
        return names[given]
    kinds = {type(v) for v in values}
    if len(kinds) != 1 or next(iter(kinds)) not in (str, int) or bool in kinds:
        raise EditError(f"{where}: {what}s of types {sorted(k.__name__ for k in kinds) or 'none'}; a Flink "
                        f"savepoint is bootstrapped with String, Long or Integer {what}s (pass {what}_type=)")
    return names[kinds.pop()]


def new_operator(reader: FlinkSnapshotReader, uid: str, parallelism: int | None,
                 max_parallelism: int | None) -> OperatorState:
    keyed = [o for o in reader.meta.operators if _keyed_subtasks(o)]
    p = parallelism or (keyed[0].parallelism if keyed else None)
    max_p = max_parallelism or (keyed[0].max_parallelism if keyed else None)
    if not p or not max_p or not 0 < p <= max_p:
        raise EditError(f"{reader.metadata_file}: new operator {uid!r}: expected 0 < parallelism <= max parallelism "
                        f"(pass parallelism= and max_parallelism=), found {p} and {max_p}")
    return OperatorState(uid, uid, operator_id_for_uid(uid), p, max_p)


def bootstrap_spec(reader: FlinkSnapshotReader, plan: OperatorPlan, state: str, frame: Any, kind: str,
                   value_type: Any = None, user_key_type: Any = None) -> dict:
    """Check one ``bootstrap`` into a Flink savepoint: a value, list or map state of String, Long or Integer values
    (and map keys) keyed by String or Long keys; its header entry and its entries' bytes (key groups as Flink
    assigns them). A list state is one entry per key, its elements (the frame's rows of the key, in order) joined
    by Flink's list delimiter; a map state one entry per (key, user key), the value behind a not-null flag."""
    where = f"{reader.metadata_file}: operator {plan.uid!r}, state {state!r}"
    if kind not in _KEYED_TYPES:
        raise EditError(f"{where}: kind {kind!r}; a Flink savepoint is bootstrapped with value, list or map state")
    columns = ("key", "user_key", "value") if kind == "map" else ("key", "value")
    missing = [c for c in columns if c not in getattr(frame, "columns", ())]
    if missing:
        raise EditError(f"{where}: the frame has no column {missing}; a {kind} state is bootstrapped from "
                        f"{', '.join(columns)}")
    if state in plan.bootstrapped:
        raise EditError(f"{where}: bootstrapped twice; expected one frame per state")
    keys, values = frame["key"].tolist(), frame["value"].tolist()
    key_kind = _simple_kind(keys, None, "key", where)
    value_kind = _simple_kind(values, value_type, "value", where)
    user_keys = frame["user_key"].tolist() if kind == "map" else [None] * len(keys)
    uk_kind = _simple_kind(user_keys, user_key_type, "user key", where) if kind == "map" else None
    others = {s["key_kind"] for s in plan.bootstrapped.values()}
    if others and others != {key_kind}:
        raise EditError(f"{where}: keys are {key_kind}, the operator's other bootstrapped states' {others.pop()}; "
                        "expected one key type per operator")
    key_enc, value_enc = _Simple(key_kind), _Simple(value_kind)
    entries: dict[Any, list] = {}  # (key, user key) -> [key group, key bytes, [value bytes]]
    for k, uk, v in zip(keys, user_keys, values):
        at = f"{where}, key {k!r}" + (f", user key {uk!r}" if kind == "map" else "")
        if v is None:
            raise EditError(f"{at}: a value None; expected a {value_kind}")
        one = entries.get((k, uk))
        if one is not None and kind != "list":
            raise EditError(f"{at}: appears twice in the frame; expected one row each")
        if one is None:
            kbytes = encode(key_enc, k, at) + b"\x00"  # + the void namespace
            if kind == "map":
                kbytes += encode(_Simple(uk_kind), uk, at)
            one = entries[(k, uk)] = [assign_to_key_group(k, plan.max_parallelism), kbytes, []]
        one[2].append((b"\x00" if kind == "map" else b"") + encode(value_enc, v, at))
    rows = [(kg, kbytes, b",".join(vals)) for kg, kbytes, vals in entries.values()]
    return {"key_kind": key_kind, "entry": _state_entry(state, kind, value_kind, uk_kind), "rows": rows}


class _BootstrapEntries(_OperatorEntries):
    """The entries of a new operator's bootstrapped states, written as :class:`_OperatorEntries` writes kept ones."""

    def __init__(self, reader: FlinkSnapshotReader, plan: OperatorPlan) -> None:
        self.reader, self.plan, self.op = reader, plan, plan.source
        specs = list(plan.bootstrapped.items())
        d = DataOutput()
        d.write_int(6)  # the keyed backend header's version (Flink 1.15 .. 2.x)
        d.write_byte(0)  # not compressed
        d.write_bytes(_serializer_snapshot(specs[0][1]["key_kind"]))
        self.header_start = bytes(d.buf)
        self.states = [(name, spec["entry"]) for name, spec in specs]
        self.buckets = defaultdict(list)
        self.streaming, self.passes, self.loaded = False, [(0, plan.max_parallelism - 1)], (0, plan.max_parallelism - 1)
        for sid, (name, spec) in enumerate(specs):
            for kg, key, value in spec["rows"]:
                if name in plan.dropped_states:
                    continue
                self.buckets[kg].append((sid, key, value))
        self.nonempty = set(self.buckets)
