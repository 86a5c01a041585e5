"""Inputs of ``bench_scale``: engine savepoints of 100 M keys and more, built once and cached under .cache/scale/.

The savepoint is ``bench_explorer``'s job (``key_by(user).process(...)``: ``count``, a
ValueState[int] with a TTL of one day, one entry per key; ``recent``, a ListState[int] of 20
entries for 1 % of the keys, the hot ones, which also get 50x the traffic in the heavy-hitter
sketch and the per-key-group record counters) at parallelism 8 and max parallelism 256,
written with the engine's own format functions (:class:`explorer.format.keyed.KeyGroupParquetWriter`,
:func:`explorer.format.snapshot.write_metadata`, ``file_entry``) one subtask at a time, so
building it needs about 1 GB whatever the key count. The ``variant`` is the same job a
little later (0.5 % of the keys gone, 0.5 % new, the count of 1 % of the keys one higher),
for the diff. A folder holds a ``.complete`` marker once fully written; a half-written one
is built again.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "scale"
PARALLELISM = 8
MAX_PARALLELISM = 256
T0_MS = 1_700_000_000_000
DAY_MS = 86_400_000
LIST_LEN = 20
#: keys hashed into key groups per chunk (bounds the memory of the build)
CHUNK = 4_000_000


def _keys(ids: np.ndarray) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(ids), pa.string()), width=9, padding="0")
    return pc.binary_join_element_wise("user-", digits, "")


def _descriptors():
    from explorer.engine import ListStateDescriptor, StateTtlConfig, ValueStateDescriptor

    return [ValueStateDescriptor("count", int, ttl=StateTtlConfig(DAY_MS)), ListStateDescriptor("recent", int)]


def engine_savepoint(n_keys: int, variant: bool = False, cache: Path = CACHE, progress: bool = True) -> Path:
    """The cached engine savepoint of ``n_keys`` keys (built on first use; see the module doc)."""
    name = f"engine-{n_keys}" + ("-variant" if variant else "")
    folder = cache / name
    if (folder / ".complete").exists():
        return folder
    t0 = time.perf_counter()
    _build(folder, n_keys, variant, progress)
    (folder / ".complete").write_text(f"built in {time.perf_counter() - t0:.0f} s\n")
    return folder


def _build(folder: Path, n_keys: int, variant: bool, progress: bool) -> None:
    from tqdm.auto import tqdm

    from explorer.engine.metrics import SpaceSaving
    from explorer.format.keyed import KeyGroupParquetWriter
    from explorer.format.snapshot import file_entry

    from .bench_explorer import subtask_entry, write_job_metadata
    from explorer.keygroups import key_group_range_for_operator, key_groups_of, operator_indices_for_key_groups

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shift = n_keys // 200 if variant else 0
    kg = np.empty(n_keys, dtype=np.int16)
    for lo in tqdm(range(0, n_keys, CHUNK), desc=f"hashing {n_keys:,} keys", disable=not progress):
        ids = np.arange(shift + lo, shift + min(n_keys, lo + CHUNK), dtype=np.int64)
        kg[lo: lo + len(ids)] = key_groups_of(_keys(ids), MAX_PARALLELISM)
    owner = operator_indices_for_key_groups(MAX_PARALLELISM, PARALLELISM, np.arange(MAX_PARALLELISM))
    descs = _descriptors()
    files: dict[str, Any] = {}
    subtasks = []
    for index in tqdm(range(PARALLELISM), desc="writing subtasks", disable=not progress):
        r = key_group_range_for_operator(MAX_PARALLELISM, PARALLELISM, index)
        pos = np.flatnonzero(owner[kg] == index)
        pos = pos[np.argsort(kg[pos], kind="stable")]
        ids = pos.astype(np.int64) + shift
        del pos
        k = _keys(ids)
        skg = kg[ids - shift].astype(np.int32)
        mix = (ids * 2654435761) & 0xFFFFFFFF
        hot = (mix % 100) == 0
        counts = 1 + (mix >> 7) % 19
        counts[hot] *= 50
        if variant:
            counts[ids % 100 == 7] += 1
        last_access = T0_MS - (mix * 7) % DAY_MS
        n = len(ids)
        count_table = pa.table({
            "key_group": pa.array(skg, pa.int32()), "key": k, "namespace": pa.nulls(n),
            "user_key": pa.nulls(n), "value": pa.array(counts), "last_access": pa.array(last_access),
        })
        hot_idx = np.flatnonzero(hot)
        rep = np.repeat(hot_idx, LIST_LEN)
        m = len(rep)
        recent_table = pa.table({
            "key_group": pa.array(skg[rep], pa.int32()), "key": k.take(pa.array(rep)), "namespace": pa.nulls(m),
            "user_key": pa.array(np.tile(np.arange(LIST_LEN, dtype=np.int32), len(hot_idx))),
            "value": pa.array(np.repeat(ids[hot_idx], LIST_LEN) * 31 + np.tile(np.arange(LIST_LEN), len(hot_idx))),
            "last_access": pa.nulls(m, pa.int64()),
        })
        states = []
        for desc, table in zip(descs, (count_table, recent_table)):
            rel = f"keyed/process/{desc.name}/{index}.parquet"
            w = KeyGroupParquetWriter(folder / rel, table.schema)
            for batch in table.to_batches(max_chunksize=1 << 20):
                w.write(pa.Table.from_batches([batch]))
            groups = w.close()
            files[rel] = file_entry(folder, folder / rel)
            states.append({"name": desc.name, "file": rel, "rows": table.num_rows, "row_groups": groups,
                           "key_kind": "str", "namespace_kind": "null"})
        records = np.bincount(skg - r.start, weights=counts, minlength=len(r)).astype(np.int64)
        sketch = SpaceSaving(64)
        top = np.argsort(counts)[::-1][:64]
        for i in sorted(top, key=lambda j: -counts[j]):
            sketch.update(k[int(i)].as_py(), int(counts[i]))
        subtasks.append(subtask_entry(index, r, states, files, records, sketch))
        del count_table, recent_table, k, ids, skg, counts, mix, hot, last_access
    write_job_metadata(folder, files, descs, subtasks, job=f"scale-{n_keys}", checkpoint_id=2 if variant else 1,
                       description="bench_scale: key_by(user).process(count, recent)",
                       parallelism=PARALLELISM, max_parallelism=MAX_PARALLELISM)


def state_files(folder: Path) -> list[Path]:
    """The Parquet state files of a savepoint (what a raw read reads)."""
    return sorted((Path(folder) / "keyed").rglob("*.parquet"))
