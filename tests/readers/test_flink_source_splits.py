"""Source split state (issue 33): a FLIP-27 source's ``SourceReaderState`` decoded into named fields.

NumberSequenceSplit: against a real Flink 2.3 savepoint taken mid-run (``tools/flink/src/SourceSplits.java``:
``env.fromSequence(0, N - 1)`` at parallelism 2, each reader's chained map recording the last number it
passed on at the snapshot). KafkaPartitionSplit: the Kafka connector is not on PyPI or Debian here, so
its bytes are BUILT HERE from the connector's published ``KafkaPartitionSplitSerializer`` format (version 0:
writeUTF topic, writeInt partition, writeLong starting offset, writeLong stopping offset or Long.MIN_VALUE)
and are not checked against real Flink output.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import explorer
from explorer.readers.flink.splits import decode_split

PRODUCTION = Path(__file__).resolve().parents[2] / "sample_data" / "flink" / "production"
SPLITS = PRODUCTION / "source-splits-heap-canonical-savepoint"


def _utf(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def _versioned(version: int, payload: bytes) -> bytes:
    return struct.pack(">ii", version, len(payload)) + payload


def _kafka_split(topic: str, partition: int, start: int, stop: int | None) -> bytes:
    """A KafkaPartitionSplit as the connector's serializer (version 0) writes it: built from the published
    format, not real output."""
    return _versioned(0, _utf(topic) + struct.pack(">iqq", partition, start, -(1 << 63) if stop is None else stop))


def test_number_sequence_splits_are_where_the_job_was():
    exp = json.loads((SPLITS / "EXPECTED.json").read_text())
    src = exp["source"]
    snap = explorer.open(SPLITS)
    ops = snap.operator_state()
    rows = ops[ops["state"] == src["state"]]
    assert set(rows["operator"]) == {f"Source: {src['operator']}"}
    assert set(rows["mode"]) == {"split"}
    got = {int(r.subtask): r.value for r in rows.itertuples()}
    starts = sorted(s["first_seen"] for s in src["splits"])  # each reader's split began at the first number it saw
    assert len(got) == len(src["splits"]) == 2
    for s in src["splits"]:
        v = got[s["subtask"]]
        assert isinstance(v, dict), v
        assert v["split_type"] == "NumberSequenceSplit" and v["serializer_version"] == 1
        assert v["from"] == s["from"] == s["last_seen"] + 1  # resumes right after the last number passed on
        nxt = [b for b in starts if b > s["first_seen"]]
        assert v["to"] == (nxt[0] - 1 if nxt else exp["numbers"] - 1)  # the splits tile 0..N-1
        assert isinstance(v["split_id"], str) and v["split_id"]
    assert len({v["split_id"] for v in got.values()}) == 2
    assert not [n for n in snap.notes if "split" in n]


def test_the_production_jobs_sequence_source_decodes():
    """The production jobs' source (fromSequence(0, Long.MAX_VALUE), idling after its events): one split, past
    every event the job sent."""
    exp = json.loads((PRODUCTION / "plain-rocksdb-canonical-savepoint" / "EXPECTED.json").read_text())
    ops = explorer.open(PRODUCTION / "plain-rocksdb-canonical-savepoint", uids=exp["uids"]).operator_state()
    (v,) = ops[ops["state"] == "SourceReaderState"]["value"]
    assert v["split_type"] == "NumberSequenceSplit"
    assert v["to"] == 2**63 - 1 and v["from"] >= exp["events"]


def test_kafka_partition_split_from_its_published_format():
    v, why = decode_split(_kafka_split("orders", 3, 12345, None))
    assert why is None
    assert v == {"split_type": "KafkaPartitionSplit", "split_id": "orders-3", "topic": "orders", "partition": 3,
                 "starting_offset": 12345, "stopping_offset": None, "serializer_version": 0}
    v, _ = decode_split(_kafka_split("événements", 0, -2, 999))  # modified UTF-8 topic; EARLIEST marker; bounded
    assert (v["topic"], v["starting_offset"], v["stopping_offset"]) == ("événements", -2, 999)


def test_unknown_split_stays_raw_with_a_note():
    odd = _versioned(3, b"\x01\x02\x03")
    v, why = decode_split(odd)
    assert v == odd and "version 3" in why and "left raw" in why
    v, why = decode_split(b"\x00\x00")
    assert v == b"\x00\x00" and why


def test_a_snapshot_with_an_unknown_split_notes_it(tmp_path, monkeypatch):
    """Through operator_state(): the element stays bytes and snap.notes names the state."""
    from explorer.readers.flink import splits

    monkeypatch.setattr(splits, "_LAYOUTS", [])  # as if no layout were known
    snap = explorer.open(SPLITS)
    ops = snap.operator_state()
    assert all(isinstance(v, bytes) for v in ops["value"])
    assert any("SourceReaderState" in n and "left raw" in n for n in snap.notes)
