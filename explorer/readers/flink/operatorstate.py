"""Operator (non-keyed) state: list, union and broadcast state. Stub, filled in below."""

from __future__ import annotations


def read_operator_state(data, handle, where, note):
    return []
