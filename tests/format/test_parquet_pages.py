"""Values of a Parquet BYTE_ARRAY column located in place (the direct route of a canonical restore).

Every located value must be the very bytes pyarrow reads from the same file, whatever page layout
pyarrow's writer chose (data page v1 and v2, page checksums, many small pages, empty values); a
chunk not stored as uncompressed PLAIN without nulls is declined (None), and bytes that contradict
themselves are a SnapshotCorruptError naming the file and row group, never values cut wrong.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from explorer.errors import SnapshotCorruptError
from explorer.format.parquet_pages import ByteSpans, column_spans, map_file


def _values(n: int, seed: int = 0) -> list[bytes]:
    # lengths 0..~3000 (empty values, 1- and 2-byte varints downstream), bytes of every value
    return [bytes((i * 7 + j + seed) % 256 for j in range((i * 613 + seed) % 3001 if i % 11 else 0)) for i in range(n)]


def _write(path, values, **options) -> None:
    t = pa.table({"key_group": pa.array(range(len(values)), pa.int32()),
                  "value": pa.array(values, pa.binary())})
    opts = {"compression": "none", "use_dictionary": ["key_group"], "write_statistics": ["key_group"]}
    opts.update(options)
    pq.write_table(t, path, row_group_size=options.pop("row_group_size", 250), **opts)


def _spans(path, rg: int, data=None) -> ByteSpans | None:
    md = pq.ParquetFile(path).metadata
    j = next(k for k in range(md.num_columns) if md.schema.column(k).path == "value")
    col = md.schema.column(j)
    return column_spans(map_file(path) if data is None else data, md.row_group(rg).column(j),
                        col.max_definition_level, col.max_repetition_level, f"{path}: row group {rg}")


@pytest.mark.parametrize("options", [
    {},
    {"data_page_version": "2.0"},
    {"write_page_checksum": True},
    {"write_page_checksum": True, "data_page_version": "2.0"},
    {"data_page_size": 4096},  # a page every few values
    {"data_page_size": 1, "write_page_checksum": True},  # a page per value
    {"write_statistics": True},  # min/max of the values in every page header (Thrift binaries, bools)
    {"write_statistics": True, "data_page_version": "2.0"},
], ids=["v1", "v2", "crc", "crc-v2", "small-pages", "page-per-value", "statistics", "statistics-v2"])
def test_located_values_are_the_bytes_pyarrow_reads(tmp_path, options):
    path = tmp_path / "f.parquet"
    values = _values(700)
    _write(path, values, **options)
    pf = pq.ParquetFile(path)
    seen = []
    for rg in range(pf.metadata.num_row_groups):
        spans = _spans(path, rg)
        assert spans is not None
        want = pf.read_row_group(rg, columns=["value"]).column(0).to_pylist()
        assert spans.to_pylist() == want
        assert spans.nbytes == sum(map(len, want))
        seen += spans.to_pylist()
    assert seen == values
    assert pf.metadata.num_row_groups == 3


def test_take_filter_and_concat_act_on_spans(tmp_path):
    path = tmp_path / "f.parquet"
    values = _values(500, seed=3)
    _write(path, values)
    data = map_file(path)
    a, b = _spans(path, 0, data), _spans(path, 1, data)
    both = ByteSpans.concat([a, b])
    assert both.to_pylist() == values[:500]
    assert both.take(pa.array([499, 0, 260])).to_pylist() == [values[499], values[0], values[260]]
    mask = np.arange(len(both)) % 3 == 0
    assert both.filter(mask).to_pylist() == values[:500:3]
    other = tmp_path / "g.parquet"
    _write(other, values)
    with pytest.raises(ValueError, match="different buffers"):
        ByteSpans.concat([a, _spans(other, 0)])


@pytest.mark.parametrize(("what", "options", "values"), [
    ("nulls", {}, [b"a", None, b"c"] * 100),
    ("dictionary", {"use_dictionary": True}, [b"x", b"y"] * 150),
    ("compressed", {"compression": "zstd"}, [b"abc" * 50] * 300),
    ("nulls-v2", {"data_page_version": "2.0"}, [None, b"b"] * 150),
])
def test_other_layouts_are_declined(tmp_path, what, options, values):
    path = tmp_path / f"{what}.parquet"
    _write(path, values, **options)
    assert _spans(path, 0) is None


def _first_page(path):
    md = pq.ParquetFile(path).metadata
    j = next(k for k in range(md.num_columns) if md.schema.column(k).path == "value")
    return int(md.row_group(0).column(j).data_page_offset)


def test_a_length_running_past_its_page_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "f.parquet"
    values = [b"v" * 40] * 300
    _write(path, values)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"\x28\x00\x00\x00" + b"v" * 40, _first_page(path))  # the first value's length prefix
    raw[at + 2] = 0x7F  # 40 -> ~8 MB: past the page
    path.write_bytes(bytes(raw))
    with pytest.raises(SnapshotCorruptError, match=r"f\.parquet: row group 0: column 'value'.*PLAIN values"):
        _spans(path, 0)


def test_a_page_checksum_is_verified(tmp_path):
    path = tmp_path / "f.parquet"
    _write(path, [b"w" * 40] * 300, write_page_checksum=True)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"w" * 40, _first_page(path))
    raw[at + 5] ^= 0x01  # a value byte: the walk alone would not notice
    path.write_bytes(bytes(raw))
    with pytest.raises(SnapshotCorruptError, match=r"f\.parquet: row group 0.*CRC-32"):
        _spans(path, 0)


def test_a_torn_page_header_is_an_error_not_a_wrong_read(tmp_path):
    path = tmp_path / "f.parquet"
    _write(path, [b"z" * 40] * 300)
    raw = bytearray(path.read_bytes())
    start = _first_page(path)
    raw[start : start + 6] = b"\xff" * 6  # field headers of no Thrift type
    path.write_bytes(bytes(raw))
    with pytest.raises(SnapshotCorruptError, match=r"f\.parquet: row group 0: column 'value'"):
        _spans(path, 0)
