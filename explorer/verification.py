"""``explorer.verify(path)``: is a snapshot whole? Its files checked without decoding a value.

Every checksum the format carries, every file its metadata names or its newest batch needs, and every
path against the roots the format allows (what each format checks: :mod:`explorer.readers.checks`). The
answer is a :class:`VerifyReport`: one row per file (``file``, ``status``: ok, missing, damaged or
outside, ``detail``) and an overall :attr:`VerifyReport.ok`. ``state-explorer verify PATH`` prints it and
exits non-zero when anything is wrong. No JVM is started, nothing is decoded, nothing is written.

A job's checkpoint directory (``chk-N`` folders) is verified at its newest ``chk-N`` holding a ``_metadata``:
the one the engines would restore, so a damaged newest checkpoint is reported, not passed over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import SnapshotNotFoundError
from .format import budget
from .format.checkpoint_dir import checkpoint_folders, has_metadata
from .readers.checks import OK, STATUSES, FileCheck
from .storage import FileCache, as_path
from .stored import READERS, parse_memory_budget, register_optional_readers

__all__ = ["VerifyReport", "verify"]


@dataclass
class VerifyReport:
    """What :func:`verify` found: the snapshot checked, its format and one :class:`FileCheck` per file."""

    path: Any
    format: str
    checks: list[FileCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every file is ``ok`` (and there was a file to check)."""
        return bool(self.checks) and all(c.status == OK for c in self.checks)

    @property
    def problems(self) -> list[FileCheck]:
        """The checks that are not ``ok``."""
        return [c for c in self.checks if c.status != OK]

    def to_frame(self) -> pd.DataFrame:
        """One row per file: ``file``, ``status``, ``detail``."""
        return pd.DataFrame([(c.file, c.status, c.detail) for c in self.checks], columns=["file", "status", "detail"])

    def counts(self) -> dict[str, int]:
        """How many files have each status."""
        return {s: sum(c.status == s for c in self.checks) for s in STATUSES}

    def summary(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in self.counts().items() if n)
        return f"{self.path} ({self.format}): {'OK' if self.ok else 'NOT OK'}: {counts or 'no files'}"

    def __str__(self) -> str:
        lines = [self.summary()]
        for c in self.checks:
            lines.append(f"  {c.status:<8} {c.file}: {c.detail}")
        return "\n".join(lines)


def verify(path: str | Path, storage_options: dict[str, Any] | None = None, cache_dir: str | Path | None = None,
           cache_max_bytes: int | str | None = None, memory_budget: int | str | None = None,
           **options: Any) -> VerifyReport:
    """Check the snapshot at ``path`` without decoding values (see module doc): a :class:`VerifyReport`.

    ``options``: as for :func:`explorer.open` (``allow_roots=`` extra folders files may lie in, a Spark
    checkpoint's ``batch_id=``); options about decoding values are accepted and not needed.
    ``memory_budget``: as for :func:`explorer.open`, what a declared size may take while it is checked (a
    metadata file and its JSON, a zip member); a file over it is reported ``damaged``, saying so.
    Raises :class:`~explorer.errors.SnapshotNotFoundError` when ``path`` holds no snapshot of a known format.
    """
    with budget.using(parse_memory_budget(memory_budget)):
        return _verify(path, storage_options, cache_dir, cache_max_bytes, **options)


def _verify(path: str | Path, storage_options: dict[str, Any] | None, cache_dir: str | Path | None,
            cache_max_bytes: int | str | None, **options: Any) -> VerifyReport:
    cache = FileCache(cache_dir, cache_max_bytes) if (cache_dir is not None or cache_max_bytes is not None) else None
    p = as_path(path, storage_options, cache)
    if not p.exists():
        raise SnapshotNotFoundError(f"{p}: no such file or directory; expected a checkpoint or savepoint folder")
    register_optional_readers()
    target = p
    if p.is_dir() and not (p / "_metadata").exists():
        chks = checkpoint_folders(p, has_metadata)
        if chks:
            target = chks[-1][1]
    cls = next((c for c in READERS if _detects(c, target)), None)
    if cls is None:
        raise SnapshotNotFoundError(
            f"{target}: no snapshot State Explorer knows; expected an engine or Apache Flink snapshot folder "
            "(_metadata), a job's checkpoint directory (chk-N) or a Spark Structured Streaming checkpoint")
    return VerifyReport(target, cls.format_name, cls.check_files(target, **options))


def _detects(cls: Any, path: Any) -> bool:
    try:
        return bool(cls.detect(path))
    except Exception:  # noqa: BLE001 - a detection that fails is no detection here; the checks say why
        return False
