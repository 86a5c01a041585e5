"""Checkpointing configuration (frozen, with Flink's names)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class CheckpointingMode(enum.Enum):
    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"


@dataclass(frozen=True)
class CheckpointConfig:
    """How and when a job checkpoints.

    ``interval_ms`` triggers on processing time (the environment's clock);
    ``interval_records`` triggers after that many source records, which is
    deterministic whatever the clock does (handy in tests and workshops).
    ``unaligned`` stores in-flight records instead of aligning barriers.
    ``incremental`` (RocksDB backend) shares unchanged SST files between checkpoints.
    """

    directory: Path
    interval_ms: int | None = None
    interval_records: int | None = None
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    unaligned: bool = False
    min_pause_ms: int = 0
    timeout_ms: int = 10 * 60 * 1000
    max_concurrent: int = 1
    retained: int = 1
    incremental: bool = False
    asynchronous: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))
        if self.interval_ms is not None and self.interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, found {self.interval_ms}")
        if self.interval_records is not None and self.interval_records <= 0:
            raise ValueError(f"interval_records must be positive, found {self.interval_records}")
        if self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, found {self.max_concurrent}")
        if self.retained < 1:
            raise ValueError(f"retained must be at least 1, found {self.retained}")
        if self.unaligned and self.mode is not CheckpointingMode.EXACTLY_ONCE:
            raise ValueError("unaligned checkpoints exist only in EXACTLY_ONCE mode")
