"""State migration on restore: is the job's declaration compatible with the stored state, and how
stored values become values of the declared type.

Shared by the canonical (Parquet) restore (:mod:`.restore`) and the native one
(:mod:`.incremental`). As in Flink's state migration, a restored state must keep
its kind, its TTL and its map key type; its value type may change compatibly (a
dataclass may gain fields with defaults or lose fields, also inside lists and
optionals). Anything else is a :class:`~explorer.errors.StateMigrationError`
naming the state and both sides.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...errors import StateMigrationError
from ...format.states import StoredState
from ...format.types import TypeInfo, describe_type

__all__ = ["check_declaration", "converter"]


def check_declaration(stored: "StoredState | dict[str, Any]", descriptor: Any, operator: str) -> None:
    """Raise unless ``descriptor`` (the job's declaration) may take the ``stored`` state."""
    stored = StoredState.of(stored)
    new = descriptor.describe()
    where = f"operator {operator!r}, state {stored.name!r}"
    if new["kind"] != stored.kind:
        raise StateMigrationError(
            f"{where}: the snapshot holds {stored.kind} state, the job declares {new['kind']} state"
        )
    if new["ttl"] != stored.ttl:
        raise StateMigrationError(
            f"{where}: TTL changed: the snapshot has {stored.ttl}, the job declares {new['ttl']}"
        )
    if stored.user_key_type != new.get("user_key_type"):
        raise StateMigrationError(
            f"{where}: map key type changed from {stored.user_key_type} to {new.get('user_key_type')}"
        )


def converter(old: dict, new_info: TypeInfo, where: str) -> Any:
    """A function from the stored Arrow value (old type) to a value of the new type, or raise."""
    new = new_info.describe()
    if old == new:
        return new_info.from_arrow
    if old.get("type") == "struct" and new.get("type") == "struct":
        old_fields = {f["name"]: f["type"] for f in old["fields"]}
        fields = getattr(new_info, "fields")
        plan = []
        for name, finfo, default in fields:
            if name in old_fields:
                plan.append((name, converter(old_fields[name], finfo, f"{where}.{name}"), None))
            else:
                if default is dataclasses.MISSING:
                    raise StateMigrationError(
                        f"{where}: the new type adds field {name!r} without a default; the snapshot has "
                        f"{describe_type(old)}, the job declares {describe_type(new)}"
                    )
                plan.append((name, None, default))
        cls = getattr(new_info, "cls", None)

        def convert(v):
            if v is None:
                return None
            d = {}
            for name, conv, default in plan:
                if conv is not None:
                    d[name] = conv(v.get(name))
                else:
                    d[name] = default() if callable(default) else default
            return cls(**d) if cls is not None else d

        return convert
    if old.get("type") == new.get("type") and old.get("type") in ("list", "optional"):
        inner = converter(old["of"], getattr(new_info, "element", None) or getattr(new_info, "inner"), where)
        if old["type"] == "list":
            return lambda v: None if v is None else [inner(x) for x in v]
        return lambda v: None if v is None else inner(v)
    raise StateMigrationError(
        f"{where}: incompatible type change: the snapshot holds {describe_type(old)}, "
        f"the job declares {describe_type(new)}"
    )
