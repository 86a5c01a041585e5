"""State descriptors: what a keyed state is called and what it holds.

A descriptor names a state and declares its type (and optionally a TTL). The
name is the state's identity across restores. The state objects a descriptor
gives access to are in :mod:`explorer.engine.state`, which re-exports every
name here; the storage under them in :mod:`explorer.engine.backends`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from ..format.types import TypeInfo, type_info
from .ttl import StateTtlConfig

__all__ = [
    "AggregateFunction",
    "AggregatingStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "StateKind",
    "ValueStateDescriptor",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class StateKind(enum.Enum):
    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"


class AggregateFunction(Generic[T, V]):
    """Flink's AggregateFunction: an accumulator built up from inputs."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add(self, value: T, accumulator: Any) -> Any:
        raise NotImplementedError

    def get_result(self, accumulator: Any) -> V:
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class StateDescriptor:
    """Common part of every descriptor: a name, and optionally a TTL."""

    name: str

    kind = StateKind.VALUE

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a state descriptor needs a non-empty name, found {self.name!r}")

    @property
    def value_info(self) -> TypeInfo:
        raise NotImplementedError

    @property
    def user_key_info(self) -> TypeInfo | None:
        return None

    def describe(self) -> dict[str, Any]:
        """JSON description written into snapshot metadata."""
        ttl: StateTtlConfig | None = getattr(self, "ttl", None)
        d = {
            "name": self.name,
            "kind": self.kind.value,
            "value_type": self.value_info.describe(),
            "ttl": None if ttl is None else ttl.to_json(),
        }
        uk = self.user_key_info
        if uk is not None:
            d["user_key_type"] = uk.describe()
        return d


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor):
    """One value per key: ``ValueStateDescriptor("count", int)``."""

    type: Any = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.VALUE

    @property
    def value_info(self) -> TypeInfo:
        return type_info(self.type)


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor):
    """A list per key: ``ListStateDescriptor("events", Event)`` (the element type)."""

    element_type: Any = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.LIST

    @property
    def value_info(self) -> TypeInfo:
        return type_info(self.element_type)


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor):
    """A map per key: ``MapStateDescriptor("merchants", str, int)``."""

    key_type: Any = None
    value_type: Any = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.MAP

    @property
    def value_info(self) -> TypeInfo:
        return type_info(self.value_type)

    @property
    def user_key_info(self) -> TypeInfo:
        return type_info(self.key_type)


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor):
    """A value per key folded with ``reduce_function(old, new)``."""

    reduce_function: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    type: Any = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.REDUCING

    @property
    def value_info(self) -> TypeInfo:
        return type_info(self.type)


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptor):
    """An accumulator per key, built by an :class:`AggregateFunction`; declare the accumulator type."""

    aggregate_function: AggregateFunction = None  # type: ignore[assignment]
    accumulator_type: Any = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.AGGREGATING

    @property
    def value_info(self) -> TypeInfo:
        return type_info(self.accumulator_type)
