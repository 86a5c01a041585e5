"""The reference streaming engine: Flink's state model in Python.

Import what you need from here::

    from explorer.engine import StreamEnvironment, KeyedProcessFunction, ValueStateDescriptor
"""

from .clock import Clock, ManualClock, SystemClock
from .datastream import BroadcastStream, DataStream, KeyedStream, StreamEnvironment
from .functions import (
    BroadcastProcessFunction,
    Collector,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    ProcessFunction,
    RuntimeContext,
)
from .runtime import JobResult, Trace
from .sinks import CollectSink, FileSink, Sink
from .sources import CollectionSource, ColumnSource, FileSource, GeneratorSource, Source, WatermarkStrategy
from .state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from .timers import EVENT_TIME, PROCESSING_TIME, Timer, TimerBatch
from .ttl import (
    CleanupStrategies,
    IncrementalCleanup,
    RocksDBCompactionCleanup,
    StateTtlConfig,
    StateVisibility,
    UpdateType,
    is_expired,
)

__all__ = [
    "AggregateFunction",
    "AggregatingStateDescriptor",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CleanupStrategies",
    "Clock",
    "CollectSink",
    "CollectionSource",
    "Collector",
    "ColumnSource",
    "DataStream",
    "EVENT_TIME",
    "FileSink",
    "FileSource",
    "GeneratorSource",
    "IncrementalCleanup",
    "JobResult",
    "KeyedBroadcastProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListStateDescriptor",
    "ManualClock",
    "MapStateDescriptor",
    "PROCESSING_TIME",
    "ProcessFunction",
    "ReducingStateDescriptor",
    "RocksDBCompactionCleanup",
    "RuntimeContext",
    "Sink",
    "Source",
    "StateKind",
    "StateTtlConfig",
    "StateVisibility",
    "StreamEnvironment",
    "SystemClock",
    "Timer",
    "TimerBatch",
    "Trace",
    "UpdateType",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "is_expired",
]
