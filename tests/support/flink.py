"""Shared helpers for the Flink reader tests: fixtures and Flink's own expectations."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from explorer.readers.base import KeyedStateQuery
from explorer.readers.flink import FlinkSnapshotReader

ROOT = Path(__file__).resolve().parents[2]
FLINK_FIXTURES = ROOT / "sample_data" / "flink"
FIXTURE_NAMES = sorted(p.name for p in FLINK_FIXTURES.iterdir() if (p / "EXPECTED.json").is_file()) if FLINK_FIXTURES.is_dir() else []


def varint(v: int) -> bytes:
    """``v`` in 7-bit groups, low group first (RocksDB's varint32 and Flink's variable-length int),
    written from the format's description, not by the reader under test."""
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def expected(name: str) -> dict:
    """What the Flink job itself wrote about this snapshot (tools/flink/src/StateFixtures.java)."""
    return json.loads((FLINK_FIXTURES / name / "EXPECTED.json").read_text(encoding="utf-8"))


# snapshots of the whole input (EXPECTED.json describes their state exactly)...
DATASTREAM_FIXTURES = [n for n in FIXTURE_NAMES if not n.startswith("sql-") and expected(n).get("complete", True)]
# ...and ones cut mid-stream (an unaligned checkpoint under back-pressure): invariants only
PARTIAL_FIXTURES = [n for n in FIXTURE_NAMES if not expected(n).get("complete", True)]
SQL_FIXTURES = [n for n in FIXTURE_NAMES if n.startswith("sql-")]


def load(reader: FlinkSnapshotReader, query: KeyedStateQuery | None = None) -> dict[tuple[str, str], pd.DataFrame]:
    """Every keyed piece, concatenated per (operator, state)."""
    parts: dict[tuple[str, str], list[pd.DataFrame]] = {}
    for piece in reader.keyed_pieces(query or KeyedStateQuery()):
        if piece.num_rows == 0:
            continue
        df = piece.to_pandas()
        parts.setdefault((df["operator"].iat[0], df["state"].iat[0]), []).append(df)
    return {k: pd.concat(v, ignore_index=True) for k, v in parts.items()}


# the job's operator uids (Flink < 1.20 metadata stores only their OperatorIDs)
UIDS = ["user-state", "bucket-state", "user-windows", "counting-map", "events-source", "drop-idle",
        "sink-users", "sink-buckets", "sink-windows"]
