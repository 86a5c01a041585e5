"""In-flight records of unaligned checkpoints, as tagged JSON.

Records in flight are whatever a job sends between operators, so they have
no declared schema. They are stored as JSON with tags that keep Python types
apart: ``{"$t": [...]}`` a tuple, ``{"$d": [[k, v], ...]}`` a dict,
``{"$b": "hex"}`` bytes, ``{"$c": name, "f": {...}}`` a dataclass. A dataclass
comes back only as a class the restoring job registered under that name
(``env.register_record_type(Event)``): nothing named in a snapshot is ever
imported or executed, and nothing is unpickled.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..errors import JobError, SnapshotFormatError


def encode_record(value: Any, registry: Mapping[str, type]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode_record(v, registry) for v in value]
    if isinstance(value, tuple):
        return {"$t": [encode_record(v, registry) for v in value]}
    if isinstance(value, dict):
        return {"$d": [[encode_record(k, registry), encode_record(v, registry)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"$b": bytes(value).hex()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        name = cls.__qualname__
        if registry.get(name) is not cls:
            raise JobError(
                f"an unaligned checkpoint holds an in-flight {name} record, a type the job has not registered; "
                f"call env.register_record_type({name}) so a restore can rebuild it (nothing is pickled)"
            )
        return {"$c": name, "f": {f.name: encode_record(getattr(value, f.name), registry) for f in dataclasses.fields(value)}}
    raise JobError(f"an in-flight record of type {type(value).__name__} cannot be stored in an unaligned checkpoint")


def decode_record(obj: Any, registry: Mapping[str, type], where: str = "snapshot") -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [decode_record(v, registry, where) for v in obj]
    if isinstance(obj, dict):
        if "$t" in obj:
            return tuple(decode_record(v, registry, where) for v in obj["$t"])
        if "$d" in obj:
            return {decode_record(k, registry, where): decode_record(v, registry, where) for k, v in obj["$d"]}
        if "$b" in obj:
            return bytes.fromhex(obj["$b"])
        if "$c" in obj:
            cls = registry.get(obj["$c"])
            if cls is None:
                raise SnapshotFormatError(
                    f"{where}: in-flight records of type {obj['$c']!r}, which the restoring job has not registered; "
                    f"expected env.register_record_type({obj['$c']})"
                )
            return cls(**{k: decode_record(v, registry, where) for k, v in obj["f"].items()})
    raise SnapshotFormatError(f"{where}: unexpected in-flight record encoding {obj!r:.80}")
