"""Decoders for the value serializers Flink ships beyond primitives, strings and POJOs.

Each registers itself with :func:`.serializers.register_snapshot_decoder`.
"""

from __future__ import annotations
