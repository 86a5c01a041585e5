"""The rule every reader keeps (DESIGN.md, "Real state, not only our own"): a value, key or user key the
reader cannot decode stays raw bytes **and** a note in ``snap.notes`` names its state. Walks every snapshot
under ``sample_data/`` (the engine's, Flink's, Spark's through the pure-Python path) and every keyed state
in it (transformWithState's need Spark: marked ``spark``); bytes where the state declares a bytes type (``byte[]``, ``BYTES``, ``BINARY``) are values, not raw.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import explorer

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
#: type names under which bytes are the value itself
_BYTES_TYPES = ("byte[]", "bytes", "binary", "varbinary", "bytearray", "pickled")


def _snapshots() -> list:
    out = []
    for meta in sorted(SAMPLES.glob("flink/**/_metadata")):
        out.append(pytest.param(meta.parent, {}, id=str(meta.parent.relative_to(SAMPLES))))
    for engine in ("dedup", "fraud", "sessions", "url_counts"):
        for p in sorted((SAMPLES / engine).iterdir()):
            if p.is_dir() and (p.name.startswith("savepoint") or p.name == "checkpoints"):
                out.append(pytest.param(p, {}, id=str(p.relative_to(SAMPLES))))
    for p in sorted((SAMPLES / "spark").iterdir()):
        if not p.is_dir() or p.name.startswith("damaged"):
            continue
        if p.name.startswith("tws-"):  # transformWithState's stores are read by Spark itself
            out.append(pytest.param(p, {}, id=str(p.relative_to(SAMPLES)), marks=pytest.mark.spark))
        else:
            out.append(pytest.param(p, {"jvm": False}, id=str(p.relative_to(SAMPLES))))
    return out


def _options(path: Path, options: dict) -> dict:
    exp = path / "EXPECTED.json"
    if exp.is_file():
        e = json.loads(exp.read_text())
        options = {**options, **e.get("open_options", {})}
        if e.get("uids") and e.get("operator_match", "uid") == "uid":
            options["uids"] = e["uids"]
    return options


def _has_bytes(v, depth: int = 0) -> bool:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return True
    if depth > 8:
        return False
    if isinstance(v, dict):
        return any(_has_bytes(x, depth + 1) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_has_bytes(x, depth + 1) for x in v)
    return False


@pytest.mark.parametrize("path, options", _snapshots())
def test_raw_bytes_are_noted(path, options):
    snap = explorer.open(path, **_options(path, options))
    states = snap.states
    unnoted = []
    for row in states.itertuples(index=False):
        declared = " ".join("" if pd.isna(t := getattr(row, c, None)) else str(t)
                            for c in ("key_type", "value_type")).lower()  # NA: not declared (snap.states)
        if any(t in declared for t in _BYTES_TYPES):
            continue
        df = snap.keyed_state(operator=row.operator, state=row.state)
        for col in ("key", "user_key", "value"):
            if col not in df or not any(_has_bytes(v) for v in df[col]):
                continue
            if not any(repr(row.state) in n or f"'{row.state}'" in n or str(row.state) in n for n in snap.notes):
                example = next(v for v in df[col] if _has_bytes(v))
                unnoted.append(f"{row.operator}/{row.state}: {col} {str(example)[:80]} (declared {declared!r})")
    assert not unnoted, "raw bytes without a note naming their state:\n" + "\n".join(unnoted)


@pytest.mark.parametrize("fixture", ["sqldistinct-retract-rocksdb-native-savepoint",
                                     "sqldistinct-retract-rocksdb-incremental-checkpoint"])
def test_a_map_whose_values_do_not_decode_keeps_its_keys(monkeypatch, fixture):
    """A map state whose value serializer is unknown: the values are raw bytes with a note, the user keys (their
    own bytes in a RocksDB entry) still decode. Real COUNT(DISTINCT) views whose ARRAY<BIGINT> values are made
    unknown again by taking their decoder away (before it existed, the keys were raw too: b'\\x00\\x00\\x00\\x07user-00')."""
    from explorer.readers.flink import serializers
    from explorer.readers.flink.serializers import UnknownSnapshot

    cls = "org.apache.flink.table.runtime.typeutils.ArrayDataSerializer$ArrayDataSerializerSnapshot"

    def unknown(inp, ctx):
        raise UnknownSnapshot(cls, inp.pos)

    monkeypatch.setitem(serializers.SNAPSHOT_DECODERS, cls, unknown)
    path = Path(__file__).resolve().parents[2] / "sample_data" / "flink" / "production" / fixture
    want = {(e["key"]["fields"][0], e["user_key"]["fields"][0])
            for e in json.loads((path / "EXPECTED.json").read_text())["operators"]["GroupAggregate"]["states"]
            ["distinctAcc_0"]["entries"]}
    snap = explorer.open(path)
    op = next(o for o in snap.states["operator"] if o.startswith("GroupAggregate"))
    df = snap.keyed_state(operator=op, state="distinctAcc_0")
    assert set(zip(df["key"], df["user_key"])) == want
    assert all(isinstance(v, bytes) for v in df["value"])
    assert any("'distinctAcc_0'" in n and "map keys are decoded" in n for n in snap.notes)


def test_a_map_whose_keys_do_not_decode_says_its_keys_are_raw(monkeypatch):
    """A DECIMAL COUNT(DISTINCT) view (real fixture) with its key decoder taken away: keys and values raw, and the
    note says the keys are raw too, not only the values."""
    from explorer.readers.flink import serializers
    from explorer.readers.flink.serializers import UnknownSnapshot

    cls = "org.apache.flink.table.runtime.typeutils.DecimalDataSerializer$DecimalSerializerSnapshot"

    def unknown(inp, ctx):
        raise UnknownSnapshot(cls, inp.pos)

    monkeypatch.setitem(serializers.SNAPSHOT_DECODERS, cls, unknown)
    path = Path(__file__).resolve().parents[2] / "sample_data" / "flink" / "production" / "sqldistinct-types-rocksdb-native-savepoint"
    snap = explorer.open(path)
    op = next(o for o in snap.states["operator"] if o.startswith("GroupAggregate"))
    df = snap.keyed_state(operator=op, state="distinctAcc_0")
    assert len(df) > 0 and all(isinstance(v, bytes) for v in df["user_key"])
    assert any("'distinctAcc_0'" in n and "map keys" in n for n in snap.notes)
