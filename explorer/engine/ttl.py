"""State time-to-live, as Flink defines it.

Expiry is one pure function, :func:`is_expired` (defined in
:mod:`explorer.format.ttl`, where the snapshot readers use it too): an entry
last accessed at ``last_access`` (epoch ms) with time-to-live ``ttl`` is
expired at ``now`` exactly when ``last_access + ttl <= now``. At
``now = last_access + ttl - 1`` it is still alive; at ``last_access + ttl``
it is gone. TTL always runs on
processing time (as in Flink), taken from the engine's clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import timedelta

from ..format.ttl import expires_at, is_expired

__all__ = [
    "CleanupStrategies",
    "IncrementalCleanup",
    "RocksDBCompactionCleanup",
    "StateTtlConfig",
    "StateVisibility",
    "UpdateType",
    "expires_at",
    "is_expired",
]



class UpdateType(enum.Enum):
    """When an entry's last-access timestamp is refreshed."""

    ON_CREATE_AND_WRITE = "OnCreateAndWrite"
    ON_READ_AND_WRITE = "OnReadAndWrite"


class StateVisibility(enum.Enum):
    """Whether a read may return an expired entry that is still stored."""

    NEVER_RETURN_EXPIRED = "NeverReturnExpired"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "ReturnExpiredIfNotCleanedUp"


@dataclass(frozen=True)
class IncrementalCleanup:
    """Heap backend: on every state access (and optionally every record), check
    ``cleanup_size`` more entries of the state and drop the expired ones."""

    cleanup_size: int = 5
    run_cleanup_for_every_record: bool = False

    def __post_init__(self) -> None:
        if self.cleanup_size <= 0:
            raise ValueError(f"cleanup_size must be positive, found {self.cleanup_size}")


@dataclass(frozen=True)
class RocksDBCompactionCleanup:
    """RocksDB backend: drop expired entries in the background (compaction-time
    filter), re-reading the clock after ``query_time_after_num_entries`` entries."""

    query_time_after_num_entries: int = 1000


@dataclass(frozen=True)
class CleanupStrategies:
    """How expired entries are removed besides on read.

    ``full_snapshot`` leaves expired entries out of every full snapshot (not out
    of the live state). ``in_background`` turns on the backend's default
    background cleanup (incremental for heap, compaction for RocksDB) unless the
    explicit strategies are given.
    """

    full_snapshot: bool = False
    incremental: IncrementalCleanup | None = None
    rocksdb_compaction: RocksDBCompactionCleanup | None = None
    in_background: bool = True

    def heap_incremental(self) -> IncrementalCleanup | None:
        if self.incremental is not None:
            return self.incremental
        return IncrementalCleanup() if self.in_background else None

    def rocksdb_cleanup(self) -> RocksDBCompactionCleanup | None:
        if self.rocksdb_compaction is not None:
            return self.rocksdb_compaction
        return RocksDBCompactionCleanup() if self.in_background else None


def _ms(ttl: timedelta | int) -> int:
    if isinstance(ttl, timedelta):
        return int(ttl.total_seconds() * 1000)
    return int(ttl)


@dataclass(frozen=True)
class StateTtlConfig:
    """Time-to-live of a state descriptor's entries.

    >>> StateTtlConfig(timedelta(hours=24), update_type=UpdateType.ON_READ_AND_WRITE)
    """

    ttl: timedelta | int
    update_type: UpdateType = UpdateType.ON_CREATE_AND_WRITE
    visibility: StateVisibility = StateVisibility.NEVER_RETURN_EXPIRED
    cleanup: CleanupStrategies = field(default_factory=CleanupStrategies)

    def __post_init__(self) -> None:
        if self.ttl_ms <= 0:
            raise ValueError(f"TTL must be positive, found {self.ttl!r}")
        if not isinstance(self.update_type, UpdateType):
            raise TypeError(f"update_type must be an UpdateType, found {self.update_type!r}")
        if not isinstance(self.visibility, StateVisibility):
            raise TypeError(f"visibility must be a StateVisibility, found {self.visibility!r}")

    @property
    def ttl_ms(self) -> int:
        return _ms(self.ttl)

    @property
    def update_on_read(self) -> bool:
        return self.update_type is UpdateType.ON_READ_AND_WRITE

    @property
    def return_expired(self) -> bool:
        return self.visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP

    def to_json(self) -> dict:
        c = self.cleanup
        return {
            "ttl_ms": self.ttl_ms,
            "update_type": self.update_type.name,
            "visibility": self.visibility.name,
            "cleanup": {
                "full_snapshot": c.full_snapshot,
                "incremental": None
                if c.incremental is None
                else {
                    "cleanup_size": c.incremental.cleanup_size,
                    "run_cleanup_for_every_record": c.incremental.run_cleanup_for_every_record,
                },
                "rocksdb_compaction": None
                if c.rocksdb_compaction is None
                else {"query_time_after_num_entries": c.rocksdb_compaction.query_time_after_num_entries},
                "in_background": c.in_background,
            },
        }

    @classmethod
    def from_json(cls, d: dict | None) -> "StateTtlConfig | None":
        if d is None:
            return None
        c = d.get("cleanup") or {}
        inc = c.get("incremental")
        rc = c.get("rocksdb_compaction")
        return cls(
            ttl=int(d["ttl_ms"]),
            update_type=UpdateType[d["update_type"]],
            visibility=StateVisibility[d["visibility"]],
            cleanup=CleanupStrategies(
                full_snapshot=bool(c.get("full_snapshot", False)),
                incremental=None if inc is None else IncrementalCleanup(**inc),
                rocksdb_compaction=None if rc is None else RocksDBCompactionCleanup(**rc),
                in_background=bool(c.get("in_background", True)),
            ),
        )
