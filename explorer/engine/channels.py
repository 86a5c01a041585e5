"""What travels between subtasks: batches of records and stream events, through channels.

A :class:`Channel` connects one upstream subtask to one downstream subtask,
like a network channel in Flink. It carries, in order, :class:`Batch` es of
records (Flink's network buffers) and events: :class:`Watermark`,
:class:`Barrier` and :class:`EndOfInput`. Channels have a capacity in
batches; a full channel back-pressures its producer (credit-based flow
control), so memory stays bounded whatever the input size.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_WATERMARK = (1 << 63) - 1
MIN_WATERMARK = -(1 << 63)


class Batch:
    """Records with (optional) event timestamps; after a hash edge also their keys and key groups."""

    __slots__ = ("values", "timestamps", "keys", "key_groups")

    def __init__(
        self,
        values: list[Any],
        timestamps: list[int | None] | None = None,
        keys: list[Any] | None = None,
        key_groups: np.ndarray | None = None,
    ) -> None:
        self.values = values
        self.timestamps = timestamps
        self.keys = keys
        self.key_groups = key_groups

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"Batch({len(self.values)} records)"


@dataclass(frozen=True, slots=True)
class Watermark:
    timestamp: int


@dataclass(frozen=True, slots=True)
class EndOfInput:
    pass


@dataclass(frozen=True, slots=True)
class Barrier:
    """A checkpoint barrier: everything before it belongs to checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    timestamp: int
    savepoint: bool = False
    unaligned: bool = False
    #: unaligned: how many queued items this barrier jumped ahead of in its channel
    overtaken: int = 0


@dataclass
class Channel:
    """A FIFO between one producer subtask and one consumer subtask."""

    source: str  # "task[i]"
    target: str
    input_index: int = 0  # which logical input of the consumer (0, or 1 for broadcast)
    capacity: int = 4
    queue: deque = field(default_factory=deque)
    watermark: int = MIN_WATERMARK
    finished: bool = False
    blocked: bool = False  # held back during barrier alignment
    recording: list | None = None  # unaligned: batches processed here are in-flight state
    records_in: int = 0

    def has_room(self) -> bool:
        return len(self.queue) < self.capacity

    def put(self, item: Any) -> None:
        self.queue.append(item)
        if isinstance(item, Batch):
            self.records_in += len(item.values)

    def __len__(self) -> int:
        return len(self.queue)
