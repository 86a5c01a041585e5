"""A keyed state as a snapshot stores it: its description, one frozen dataclass.

Snapshot metadata describes every keyed state with the JSON of
:meth:`explorer.engine.StateDescriptor.describe`::

    {"name": "count", "kind": "value", "value_type": {"type": "int"},
     "ttl": null, "user_key_type": {"type": "str"}}

Code that restores or decodes a stored state takes a :class:`StoredState`
(:meth:`StoredState.of` accepts that JSON too), instead of the raw dict and the
loose parameters derived from it, so the fields a state has are written once,
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from ..errors import SnapshotFormatError
from .types import TypeInfo, type_from_description

__all__ = ["StoredState"]


@dataclass(frozen=True)
class StoredState:
    """One keyed state's stored description: ``name``, ``kind`` (``value``, ``list``, ``map``,
    ``reducing``, ``aggregating``, or a timer kind), the type descriptions of its values and
    map keys, and its TTL configuration as JSON (None: no TTL)."""

    name: str
    kind: str
    value_type: Mapping[str, Any]
    user_key_type: Mapping[str, Any] | None = None
    ttl: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, desc: "StoredState | Mapping[str, Any]") -> "StoredState":
        """``desc`` itself, or the state its metadata JSON describes."""
        if isinstance(desc, StoredState):
            return desc
        try:
            return cls(name=desc["name"], kind=desc["kind"], value_type=desc["value_type"],
                       user_key_type=desc.get("user_key_type"), ttl=desc.get("ttl"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise SnapshotFormatError(
                f"a stored state's description {desc!r}: found no {exc}; expected name, kind and value_type"
            ) from exc

    @property
    def has_ttl(self) -> bool:
        return self.ttl is not None

    @cached_property
    def value_info(self) -> TypeInfo:
        """The declared value type (structs as dicts: no job code needed)."""
        return type_from_description(self.value_type)

    def describe(self) -> dict[str, Any]:
        """The metadata JSON again (``of(s.describe()) == s``)."""
        d = {"name": self.name, "kind": self.kind, "value_type": self.value_type, "ttl": self.ttl}
        if self.user_key_type is not None:
            d["user_key_type"] = self.user_key_type
        return d
