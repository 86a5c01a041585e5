"""RocksDB instances in a Flink snapshot (incremental checkpoints, native savepoints; ForSt): their SST
files read without RocksDB, the part of :class:`~.reader.FlinkSnapshotReader` for incremental handles.

Flink keeps each state in its own column family, so only the SST files of the wanted states are
parsed, and for some key groups only the data blocks that may hold them
(``handles.HandleResolver.sst_for_key_groups``). Files are parsed column-wise (``format.sst.columns``)
or, where that does not apply, entry by entry (``format.sst.file`` and ``format.sst.instance.resolve``);
``columnar_sst = False`` forces the second (tests compare both). Entries become pieces in ``pieces``.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from ...errors import SnapshotCorruptError
from ...format.sst import columns as sstvec
from ...format.sst.instance import resolve
from ..base import KeyedStateQuery
from . import columnar
from .handles import IncrementalHandle
from .metadata import OperatorState, SubtaskState
from .notes import Notes
from .statemeta import BackendMeta


class SstReads(Notes):
    """One RocksDB instance's pieces (see module doc); a part of ``FlinkSnapshotReader``."""

    def _rocksdb_pieces(self, op: OperatorState, st: SubtaskState, h: IncrementalHandle, header: BackendMeta,
                        wanted: set[int], query: KeyedStateQuery, where: str) -> Iterator[pa.Table]:
        """Pieces of one RocksDB instance (its SST files), one per wanted state.

        Flink keeps each state in its own column family, so only the SST files of
        the wanted states are parsed: column-wise (``sstvec``), or entry by entry
        (``format.sst.file`` and ``format.sst.instance.resolve``) where ``sstvec`` does not apply.
        """
        kgs = query.key_groups
        # each SST file named by its RocksDB name and, when it is a file of its own, where it is stored
        # (on a remote store, a file whose column family is another state's is not fetched)
        names = {header.states[sid].name for sid in wanted} if len(wanted) < len(header.states) else None
        prefix = 2 if op.max_parallelism > 128 else 1
        ssts = [(local if sh.kind == "bytes" else f"{local} ({self.resolver.local_path(sh)})", sh)
                for local, sh in h.shared + h.private if local.endswith(".sst")]
        try:
            if kgs is None:
                files = [(name, self.resolver.read(sh)) for name, sh in ssts
                         if names is None or self.resolver.sst_column_family(sh) in (None, *names)]
            else:
                # some key groups: each file's footer, properties and index are read, then only the data blocks
                # whose index keys say they may hold a wanted key group (Flink's keys start with it); a file
                # of another state, or whose blocks all lie outside, gives no block to read
                files = []
                for name, sh in ssts:
                    f = self.resolver.sst_for_key_groups(sh, name)
                    if names is None or (f.column_family or "default") in names:
                        f.only_key_groups(prefix, kgs)
                        files.append((name, f))
            by_cf, stats = sstvec.column_families(files)
        except ValueError as exc:
            raise SnapshotCorruptError(f"{where}: {exc}") from exc
        if stats["range_deletions"]:
            self._note(f"{where}: {stats['range_deletions']} SST files hold range deletions, which are not "
                       "applied; deleted ranges may still show")
        by_name = {header.states[sid].name: sid for sid in wanted}
        key_cache = columnar.KeyCache()  # states with the same keys decode them once
        for cf_name, cf_files in by_cf.items():
            sid = by_name.get(cf_name)
            if sid is None:
                continue
            try:
                cols = self._column_family(cf_files) if self.columnar_sst else None
                if cols is None:
                    cols = _column_family_by_entries(cf_files)
            except ValueError as exc:
                raise SnapshotCorruptError(f"{where}: {exc}") from exc
            values, keys, ks, ke, vs, ve = cols
            if not len(ks):
                continue
            buf = columnar.Buf(keys)
            vbuf = buf if values is keys else columnar.Buf(values)
            head = buf.np[ks[:, None] + np.arange(prefix)].astype(np.int64)
            kg = head[:, 0] if prefix == 1 else (head[:, 0] << 8) | head[:, 1]
            keep = (kg >= h.start) & (kg <= h.end)  # rows outside the range are left over from rescaling
            if kgs is not None:
                keep &= np.isin(kg, np.fromiter(kgs, dtype=np.int64))
            if not keep.all():
                ks, ke, vs, ve = ks[keep], ke[keep], vs[keep], ve[keep]
            yield from self._kv_pieces(op, st, header, sid, buf, ks, ke, vs, ve, query, vbuf,
                                       key_cache if values is not keys else None)

    #: parse SST files column-wise (``sstvec``); False forces the entry-by-entry reader (tests compare both)
    columnar_sst = True

    @staticmethod
    def _column_family(cf_files):
        try:
            values, keys, ks, ke, vs, ve, _ = sstvec.read_column_family(cf_files)
        except sstvec.Unsupported:
            return None
        return values, keys, ks, ke, vs, ve


def _column_family_by_entries(cf_files) -> tuple[bytes, bytes, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One column family's visible entries read entry by entry (``format.sst.file``), as byte ranges of one buffer
    (returned twice: as the values' buffer and the keys')."""
    entries = [(e.keys, e.seqs, e.types, e.values) for e in (f.entries() for f in cf_files)]
    keys, values, _ = resolve(entries)
    n = len(keys)
    klen = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    vlen = np.fromiter(map(len, values), dtype=np.int64, count=n)
    both = np.empty(2 * n, dtype=np.int64)
    both[0::2], both[1::2] = klen, vlen
    offs = np.cumsum(both) - both
    ks, vs = offs[0::2].copy(), offs[1::2].copy()
    joined = b"".join([x for pair in zip(keys, values) for x in pair])
    return joined, joined, ks, ks + klen, vs, vs + vlen
