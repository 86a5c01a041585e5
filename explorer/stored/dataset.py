"""An engine snapshot's Parquet state files as one pyarrow Dataset (``StoredSnapshot.dataset``), not a copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import AnalysisError
from ..format import budget
from ..format.keyed import check_row_groups

__all__ = ["parquet_dataset"]


def parquet_dataset(path: Path, files: list[dict[str, Any]], memory_budget: int | None = None):
    """A FileSystemDataset over the state files ``files`` (``file, operator, state, subtask,
    key_group_start, key_group_end`` each) with those as partition fields and guarantees.

    ``memory_budget``: every row group of every file is checked against it first, as every other read
    of engine Parquet is (``format.keyed.check_row_groups``: the footer's sizes, then the page headers):
    a scan decodes one row group at a time, so each is checked alone, not their sum."""
    if not files:
        raise AnalysisError(f"{path}: no Parquet state file matches; expected an operator and state it holds")
    with budget.using(memory_budget):
        for f in files:
            pf = pq.ParquetFile(f["file"])
            check_row_groups(f["file"], pf, range(pf.metadata.num_row_groups), None, together=False)
    schemas = {}
    for f in files:
        schemas.setdefault((f["operator"], f["state"]), pq.read_schema(f["file"]))
    try:
        file_schema = pa.unify_schemas(list(schemas.values()))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise AnalysisError(
            f"{path}: the states {sorted(schemas)} have different column types, which one dataset cannot hold "
            f"({exc}); expected one state: snap.dataset(state=...)") from exc
    schema = file_schema.remove_metadata()
    for name, typ in (("operator", pa.string()), ("state", pa.string()), ("subtask", pa.int32())):
        schema = schema.append(pa.field(name, typ))
    parts = []
    for f in files:
        kg = ds.field("key_group")
        parts.append((ds.field("operator") == f["operator"]) & (ds.field("state") == f["state"])
                     & (ds.field("subtask") == pa.scalar(f["subtask"], pa.int32()))
                     & (kg >= pa.scalar(f["key_group_start"], pa.int32()))
                     & (kg <= pa.scalar(f["key_group_end"], pa.int32())))
    return ds.FileSystemDataset.from_paths([str(f["file"]) for f in files], schema=schema,
                                           format=ds.ParquetFileFormat(), filesystem=pafs.LocalFileSystem(),
                                           partitions=parts)
