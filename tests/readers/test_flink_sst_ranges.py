"""Native RocksDB state (incremental checkpoints, native savepoints, ForSt) read for some key groups:
each SST file's index says which key groups each data block may hold (an index key is at least its
block's last key and below the next block's first; Flink's keys start with their key group), so only
the footer, properties, index and the data blocks that may hold a wanted key group are read, from
local files and, by range, from files on the S3 server. Real Flink fixtures; the answers are those
of the whole read (on S3: tests/storage/test_sst_ranges_remote.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.format.sst.file import BLOCK_MAGIC, SstFile
from explorer.readers.base import KeyedStateQuery

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ["sample_data/flink/rocksdb-incremental-checkpoint",             # 1-byte key-group prefix
            "sample_data/flink/flink-1.20-rocksdb-incremental-checkpoint",  # index keys are user keys
            "sample_data/flink/maxp1000-rocksdb-native-savepoint",          # 2-byte prefix
            "sample_data/flink/rocksdb-native-savepoint",                    # a native savepoint
            "sample_data/flink/production/plain-filemerging-rocksdb-incremental-checkpoint"]  # segments


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    df = df.astype(str)
    return df.sort_values(list(df.columns), ignore_index=True)


def _sst_files(path: Path) -> list[Path]:
    out = []
    for p in sorted(path.rglob("*")):
        if p.is_file() and p.stat().st_size >= 53:
            with open(p, "rb") as f:
                f.seek(-8, 2)
                if int.from_bytes(f.read(8), "little") == BLOCK_MAGIC:
                    out.append(p)
    return out


def _narrow(snap) -> list[int]:
    """A few key groups of the first keyed subtask holding entries: a small part of its range."""
    rows = snap.keyed_state()
    kgs = sorted(set(rows["key_group"]))
    return kgs[: max(1, len(kgs) // 16)]


@pytest.mark.parametrize("rel", FIXTURES)
def test_some_key_groups_read_only_their_data_blocks(rel):
    path = ROOT / rel
    whole = explorer.open(path).keyed_state()
    kgs = _narrow(explorer.open(path))

    def read(key_groups) -> tuple[pd.DataFrame, int]:
        reader = explorer.open(path).reader
        query = KeyedStateQuery(key_groups=frozenset(key_groups))
        got = pd.concat([p.to_pandas() for p in reader.keyed_pieces(query)], ignore_index=True)
        return got, reader.resolver.sst_bytes_read

    got, narrow = read(kgs)
    want = whole[whole["key_group"].isin(kgs)]
    assert len(want) > 0
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want))
    everything, every_block = read(set(whole["key_group"]))  # the same path asked for every key group
    pd.testing.assert_frame_equal(_sorted(everything), _sorted(whole))
    assert 0 < narrow <= every_block
    if "filemerging" not in rel:  # (its state files hold one data block or two: nothing to leave out)
        assert narrow < every_block / 2, (narrow, every_block)


@pytest.mark.parametrize("rel", FIXTURES[:3])
def test_every_range_of_a_partition_gives_the_whole(rel):
    """Key-group ranges that cover the key groups once give every entry once (the blocks at the ranges'
    edges are read by both sides; their rows of the other side are dropped)."""
    path = ROOT / rel
    snap = explorer.open(path)
    whole = snap.keyed_state()
    maxp = int(snap.operators["max_parallelism"].max())
    parts = []
    for lo in range(0, maxp, max(1, maxp // 5)):
        kgs = frozenset(range(lo, min(maxp, lo + max(1, maxp // 5))))
        parts.extend(p.to_pandas() for p in snap.reader.keyed_pieces(KeyedStateQuery(key_groups=kgs)))
    pd.testing.assert_frame_equal(_sorted(pd.concat(parts, ignore_index=True)), _sorted(whole))


def test_a_file_outside_the_wanted_key_groups_gives_no_block():
    path = ROOT / FIXTURES[0]
    for p in _sst_files(path):
        f = SstFile(p.read_bytes(), str(p))
        handles = f.data_handles()
        held = {k[0] for k in f.entries().keys}  # (1-byte key-group prefix)
        outside = [kg for kg in range(128) if kg not in range(min(held), max(held) + 1)]
        assert outside  # (each of the fixture's files holds one subtask's half of the key groups)
        f.only_key_groups(1, outside)
        assert handles and f.data_handles() == [] and f.blocks_indexed == len(handles) and f.blocks_kept == 0
        g = SstFile(p.read_bytes(), str(p))
        g.only_key_groups(1, np.arange(0, 256))
        assert g.data_handles() == handles  # every key group wanted: every block


def test_a_partitioned_index_reads_only_the_partitions_and_blocks_of_the_wanted_key_groups(tmp_path):
    """ForSt's and RocksDB's two-level index (index partitions under a top-level index), written by RocksDB
    itself (rocksdict's SstFileWriter) with Flink-shaped keys: key group first."""
    rocksdict = pytest.importorskip("rocksdict")
    opts = rocksdict.BlockBasedOptions()
    opts.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    opts.set_block_size(256)
    opts.set_metadata_block_size(128)  # many index partitions
    options = rocksdict.Options(raw_mode=True)
    options.set_block_based_table_factory(opts)
    path = tmp_path / "x.sst"
    writer = rocksdict.SstFileWriter(options=options)
    writer.open(str(path))
    for kg in range(10, 40):
        for i in range(30):
            writer[bytes([kg]) + f"key-{i:04d}".encode()] = b"v" * 20
    writer.finish()
    data = path.read_bytes()
    whole = SstFile(data, str(path))
    assert whole.prop_int("rocksdb.block.based.table.index.type") == 2
    blocks = len(whole.data_handles())
    keys = whole.entries().keys
    f = SstFile(data, str(path))
    f.only_key_groups(1, [20])
    got = f.entries().keys
    assert [k for k in got if k[0] == 20] == [k for k in keys if k[0] == 20]
    assert f.blocks_kept < blocks / 10 and {k[0] for k in got} <= {19, 20, 21}
    none = SstFile(data, str(path))
    none.only_key_groups(1, [5, 50])
    assert none.data_handles() == []
