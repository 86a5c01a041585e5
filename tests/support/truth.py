"""Expected answers computed from a planted job's input alone (scalar key-group functions, plain loops)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from explorer.keygroups import assign_to_key_group

from tests.support.fixtures import PLANT_TTL_MS

VALUE_BYTES = 8  # an int value, a list element (int) or a map value (int)


def records_per_key(records) -> Counter:
    return Counter(k for k, _, _ in records)


def entries_per_key(records) -> dict[str, int]:
    """State entries per key after ``records``: last_seen (1) + events (n) + buckets (distinct item % 3)."""
    n = records_per_key(records)
    buckets: dict[str, set] = {}
    for k, _, item in records:
        buckets.setdefault(k, set()).add(item % 3)
    return {k: 1 + n[k] + len(buckets[k]) for k in n}


def bytes_per_key(records) -> dict[str, int]:
    """Serialized value bytes per key: every entry holds an int (8 bytes; map keys are not counted)."""
    return {k: VALUE_BYTES * e for k, e in entries_per_key(records).items()}


def subtask_loads(per_key: dict, parallelism: int, max_parallelism: int = 128) -> np.ndarray:
    loads = np.zeros(parallelism)
    for k, v in per_key.items():
        kg = assign_to_key_group(k, max_parallelism)
        loads[kg * parallelism // max_parallelism] += v
    return loads


def last_record_ms(records) -> dict[str, int]:
    last = {}
    for k, ts, _ in records:
        last[k] = ts
    return last


def expiries(records) -> dict[str, int]:
    return {k: ts + PLANT_TTL_MS for k, ts in last_record_ms(records).items()}
