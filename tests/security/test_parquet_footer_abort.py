"""A damaged Parquet footer must never abort the process.

pyarrow's ``RowGroupMetaData.column(j)`` validates what it parses (a size-statistics histogram
of the wrong length, say) by throwing a C++ exception it does not catch: ``terminate``, SIGABRT.
The fuzz found it (seed 3102, case 87: one bit of an engine savepoint's footer), reading the
row groups' sizes for the budget check before the file's SHA-256 was checked. The footer's sizes
are now parsed from its Thrift bytes by :func:`explorer.format.parquet_pages.footer_chunks`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from explorer.format.parquet_pages import footer_chunks

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "sessions" / "savepoint-rocksdb"
FILE = "keyed/sessions/sessionEnd/0.parquet"


def _damaged(tmp_path: Path) -> Path:
    snap = tmp_path / "snap"
    shutil.copytree(SAMPLE, snap)
    p = snap / FILE
    b = bytearray(p.read_bytes())
    b[856] ^= 1  # a size-statistics histogram's list header in the footer: 1 entry becomes 2
    p.write_bytes(bytes(b))
    return snap


def test_pyarrow_aborts_on_this_footer_and_the_explorer_reports_it(tmp_path):
    snap = _damaged(tmp_path)
    probe = textwrap.dedent(f"""
        import pyarrow.parquet as pq
        md = pq.ParquetFile({str(snap / FILE)!r}).metadata.row_group(0)
        for j in range(md.num_columns):
            md.column(j)
        print("no abort")
    """)
    direct = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    read = textwrap.dedent(f"""
        import explorer
        from explorer.errors import SnapshotCorruptError
        snap = explorer.open({str(snap)!r}, memory_budget="256MB")
        try:
            snap.keyed_state()
        except SnapshotCorruptError as exc:
            print("clean:", exc)
    """)
    ours = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, timeout=300, cwd=ROOT)
    if direct.returncode == 0:  # a pyarrow that no longer aborts: the explorer must still give a clean error
        assert "no abort" in direct.stdout
    else:
        assert direct.returncode < 0 or "terminate" in direct.stderr
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert "clean:" in ours.stdout and FILE.split("/")[-1] in ours.stdout and "SHA-256" in ours.stdout


def test_the_footer_parse_agrees_with_pyarrow_on_every_engine_parquet_file():
    files = sorted((ROOT / "sample_data").rglob("*.parquet"))
    assert len(files) > 20
    for f in files:
        md = pq.ParquetFile(f).metadata
        groups = footer_chunks(f)
        assert len(groups) == md.num_row_groups, f
        for i, rg in enumerate(groups):
            prg = md.row_group(i)
            assert (rg.num_rows, rg.total_byte_size, len(rg.columns)) == (prg.num_rows, prg.total_byte_size,
                                                                           prg.num_columns), f
            for j, c in enumerate(rg.columns):
                pc = prg.column(j)
                assert c.path_in_schema == pc.path_in_schema
                assert c.physical_type == pc.physical_type and c.compression == pc.compression
                assert (c.num_values, c.total_uncompressed_size, c.total_compressed_size, c.data_page_offset) == (
                    pc.num_values, pc.total_uncompressed_size, pc.total_compressed_size, pc.data_page_offset)
                assert c.has_dictionary_page == pc.has_dictionary_page
                if c.has_dictionary_page:
                    assert c.dictionary_page_offset == pc.dictionary_page_offset


def test_damaged_footers_parse_or_raise_the_trees_error(tmp_path):
    import random

    from explorer.errors import SnapshotCorruptError

    data = (ROOT / "sample_data" / "sessions" / "savepoint-rocksdb" / FILE).read_bytes()
    n = int.from_bytes(data[-8:-4], "little")
    f = tmp_path / "x.parquet"
    f.write_bytes(data[:-8] + (len(data) * 2).to_bytes(4, "little") + b"PAR1")  # longer than the file
    with pytest.raises(SnapshotCorruptError, match="x.parquet.*footer declares"):
        footer_chunks(f)
    rng = random.Random(7)
    outcomes = set()
    for _ in range(300):  # every byte of the footer is attacker-controlled: parse or refuse, nothing else
        b = bytearray(data)
        for _ in range(rng.choice((1, 2, 8))):
            b[len(data) - 8 - n + rng.randrange(n)] = rng.randrange(256)
        f.write_bytes(bytes(b))
        try:
            footer_chunks(f)
            outcomes.add("parsed")
        except SnapshotCorruptError as exc:
            assert "x.parquet" in str(exc)
            outcomes.add("refused")
    assert outcomes == {"parsed", "refused"}
