"""Decoded entries made into pieces (``readers.base.make_piece``), with their key groups checked: the
part of :class:`~.reader.FlinkSnapshotReader` every keyed path ends in.

A state's entries are decoded column-wise where ``columnar`` can (``columnar.decode_state``), else row by
row (``rows.KeyValueDecoder`` into a ``rows.RowBuffer``); either way each row's ``key_group`` is the
one in the files, re-computed with :mod:`explorer.keygroups` where the key's Java hash can be
reproduced, and disagreements are counted (``key_group_mismatches``) and noted. ``expires_at`` is
each entry's last access plus the TTL the user passed for its state (Flink stores no TTL durations).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...keygroups import assign_key_groups, key_groups_for_hash_codes, operator_indices_for_key_groups
from ..base import TIMESTAMP, KeyedStateQuery, make_piece
from . import columnar
from .metadata import OperatorState, SubtaskState
from .notes import Notes
from .rows import KeyValueDecoder, RowBuffer, hashable_keys, to_arrow
from .serializers import RowDataDecoder
from .statemeta import BackendMeta, StateMeta


class Pieces(Notes):
    """Entries to pieces, key groups checked (see module doc); a part of ``FlinkSnapshotReader``."""

    ttl: dict[str, timedelta]
    # (operator id, subtask, state id) -> (rows checked, mismatches), from whole-state reads
    _kg_checks: dict[tuple[str, int, int], tuple[int, int]]

    @property
    def key_group_mismatches(self) -> int:
        """Rows whose key group in the files differs from :mod:`explorer.keygroups` (so far read)."""
        return sum(m for _, m in self._kg_checks.values())

    def _ttl(self, meta: StateMeta):
        return self.ttl.get(meta.display_name, self.ttl.get(meta.name))

    def _kv_pieces(self, op, st, header: BackendMeta, sid: int, buf: "columnar.Buf", ks, ke, vs, ve,
                   query: KeyedStateQuery, vbuf: "columnar.Buf | None" = None,
                   key_cache: "columnar.KeyCache | None" = None) -> Iterator[pa.Table]:
        """One piece for one state's key/value entries: column-wise, else row by row.

        ``ks``/``ke`` index ``buf``; ``vs``/``ve`` index ``vbuf`` (default: ``buf``). ``key_cache``: only for
        key buffers zero past each key (``sstvec``'s).
        """
        vbuf = buf if vbuf is None else vbuf
        meta = header.states[sid]
        prefix = 2 if op.max_parallelism > 128 else 1
        try:
            cols = columnar.decode_state(meta, header.key_decoder, prefix, buf, ks, ke, vs, ve,
                                         frozenset(query.columns) if query.columns is not None else None, vbuf,
                                         key_cache)
        except columnar.Fallback:
            cols = None
        if cols is None:
            rb = RowBuffer(meta)
            dec = KeyValueDecoder(meta, header.key_decoder, op.max_parallelism)
            d, vd = bytes(buf.data), bytes(vbuf.data)  # (bytes, not views of arrays, for the row decoders)
            for a, b, c, e in zip(ks.tolist(), ke.tolist(), vs.tolist(), ve.tolist()):
                kb = bytes([d[a] & 0x7F]) + d[a + 1 : b]
                kg = int.from_bytes(kb[:prefix], "big")
                dec.decode(rb, kg, kb, vd[c:e])
            self._note_raw_values(f"{self.metadata_file} (operator {op.display_name!r}, subtask {st.index})", rb)
            piece = self._piece(op, st, header, rb, query)
        else:
            piece = self._columns_piece(op, st, header, meta, cols, query)
        if piece is not None:
            yield piece

    def _columns_piece(self, op, st, header: BackendMeta, meta, cols: "columnar.StateColumns",
                       query: KeyedStateQuery) -> pa.Table:
        kg = cols.key_group.astype(np.int64)
        n = len(kg)
        if cols.key.codes is not None:
            expected = cols.key.key_groups.get(op.max_parallelism)
            if expected is None:  # (computed once for a key column that several states share)
                expected = cols.key.key_groups[op.max_parallelism] = key_groups_for_hash_codes(
                    cols.key.codes, op.max_parallelism)
            bad = np.flatnonzero(expected != kg)
            if len(bad):
                keys = cols.key.values
                sample = ", ".join(f"{keys[int(i)].as_py()!r}: file {kg[i]}, computed {expected[i]}" for i in bad[:3])
                self._note(f"operator {op.display_name!r}: {len(bad)} rows whose key group in the files differs "
                           f"from explorer.keygroups ({sample})")
            if query.key_groups is None:
                self._kg_checks[(op.operator_id, st.index, meta.state_id)] = (n, len(bad))
        elif n:
            bad = self._check_key_groups(op, header.key_decoder, cols.key.values.to_pylist(), kg)
            if bad is not None and query.key_groups is None:
                self._kg_checks[(op.operator_id, st.index, meta.state_id)] = (n, bad)
        subtask = operator_indices_for_key_groups(op.max_parallelism, op.parallelism, kg) if n else kg
        la = pa.array(cols.last_access, type=pa.int64()) if cols.last_access is not None else pa.nulls(n, type=pa.int64())
        ttl = self._ttl(meta)
        if ttl is not None and meta.has_ttl and cols.last_access is not None:
            expires = pa.array(cols.last_access + int(ttl.total_seconds() * 1000), type=pa.int64()).cast(TIMESTAMP)
        else:
            expires = pa.nulls(n, type=TIMESTAMP)
        data = {
            "operator": op.display_name,
            "state": meta.display_name,
            "kind": meta.shown_kind,
            "key": cols.key.values,
            "key_group": pa.array(kg, type=pa.int32()),
            "subtask": pa.array(subtask, type=pa.int32()),
            "namespace": cols.namespace,
            "user_key": cols.user_key,
            "value": cols.value,
            "last_access": la.cast(TIMESTAMP),
            "expires_at": expires,
            "size_bytes": pa.array(cols.size, type=pa.int64()),
        }
        table = make_piece(data, columns=query.columns)
        if query.keys is not None:
            try:
                wanted = pa.array(list(query.keys), type=cols.key.values.type)
                table = table.filter(pc.is_in(cols.key.values, value_set=wanted))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass
        return table

    def _piece(self, op: OperatorState, st: SubtaskState, header: BackendMeta, buf: RowBuffer,
               query: KeyedStateQuery) -> pa.Table | None:
        meta = buf.meta
        keys = buf.keys
        kdec = header.key_decoder
        if isinstance(kdec, RowDataDecoder) and len(kdec.types) == 1:
            keys = [k["f0"] if isinstance(k, dict) else k for k in keys]
        kg = np.asarray(buf.key_groups, dtype=np.int64)
        if len(keys):
            bad = self._check_key_groups(op, kdec, buf.keys, kg)
            if bad is not None and query.key_groups is None:
                self._kg_checks[(op.operator_id, st.index, meta.state_id)] = (len(kg), bad)
        mask = None
        if query.keys is not None:
            try:
                wanted = set(query.keys)
                mask = np.fromiter((k in wanted for k in keys), dtype=bool, count=len(keys))
            except TypeError:
                mask = None
        subtask = operator_indices_for_key_groups(op.max_parallelism, op.parallelism, kg) if len(kg) else kg
        la = pa.array(buf.last_access, type=pa.int64())
        ttl = self._ttl(meta)
        if ttl is not None and meta.has_ttl:
            ms = int(ttl.total_seconds() * 1000)
            expires = pa.compute.add(la, ms).cast(TIMESTAMP)
        else:
            expires = pa.nulls(len(keys), type=TIMESTAMP)
        data = {
            "operator": op.display_name,
            "state": meta.display_name,
            "kind": meta.shown_kind,
            "key": to_arrow(keys, note=self._column_note(op, meta, "keys")),
            "key_group": pa.array(kg, type=pa.int32()),
            "subtask": pa.array(subtask, type=pa.int32()),
            "namespace": to_arrow(buf.namespaces, note=self._column_note(op, meta, "namespaces")),
            "user_key": to_arrow(buf.user_keys, note=self._column_note(op, meta, "user keys")),
            "value": to_arrow(buf.values, meta.element_decoder.arrow_type() if meta.element_decoder else None,
                              note=self._column_note(op, meta, "values")),
            "last_access": la.cast(TIMESTAMP),
            "expires_at": expires,
            "size_bytes": pa.array(buf.sizes, type=pa.int64()),
        }
        if not len(keys):
            data["key"] = pa.array([], type=pa.null())
        table = make_piece(data, columns=query.columns)
        if mask is not None:
            table = table.filter(pa.array(mask))
        return table

    def _check_key_groups(self, op: OperatorState, kdec, keys: list, kg: np.ndarray) -> int | None:
        """Re-compute key groups; the number of mismatches, or None when keys cannot be hashed."""
        hk = hashable_keys(kdec, keys)
        if hk is None:
            self._note(f"operator {op.display_name!r}: keys are {kdec.describe()}, whose Java hash State "
                       "Explorer does not reproduce; key groups are taken from the files unchecked")
            return None
        expected = assign_key_groups(hk, op.max_parallelism)
        bad = np.flatnonzero(expected != kg)
        if len(bad):
            sample = ", ".join(f"{keys[i]!r}: file {kg[i]}, computed {expected[i]}" for i in bad[:3])
            self._note(f"operator {op.display_name!r}: {len(bad)} rows whose key group in the files differs "
                       f"from explorer.keygroups ({sample})")
        return len(bad)
