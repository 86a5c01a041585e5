"""Issue 29, left by session 11: Parquet pages that declare more than the footer.

The row-group check (``format/keyed.py``) compared the footer's uncompressed sizes with the memory budget; Arrow
then allocates what each *page header* declares. A file whose footer says a few kilobytes for a column chunk
holding one 200 MiB zstd page (the footer's varints rewritten, same length, so nothing else moves) passed the
check and was decoded whole. The page headers are now read and checked before Arrow decodes: each page against
the budget, a chunk's pages together against the footer.
"""

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import explorer
from explorer.errors import SnapshotCorruptError
from explorer.format.snapshot import file_entry, read_metadata, write_metadata
from tests.security.test_memory_engine_parquet import SAMPLE, _bomb
from tests.support.peak import peak_of

BUDGET_MB = 64
#: Python, pandas, pyarrow and the readers imported (a child reading the undamaged sample peaks ~320 MiB)
MARGIN_MB = 384
#: what the rewritten footer declares for the bomb's column chunk and row group
SMALL = 4096


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _padded_varint(v: int, length: int) -> bytes:
    """``v`` as a Thrift varint of exactly ``length`` bytes (continuation bits on zero groups: still valid)."""
    out = bytearray((v >> (7 * i)) & 0x7F | 0x80 for i in range(length))
    out[-1] &= 0x7F
    assert v < 1 << (7 * length)
    return bytes(out)


def _lying_footer(snap, rel):
    """The footer of ``snap/rel`` rewritten to declare :data:`SMALL` bytes for its large column chunks and row
    group (each i64 in place: its zigzag varint replaced by one of the same length); the metadata's digest of
    the file updated, as whoever wrote it would."""
    path = snap / rel
    md = pq.ParquetFile(path).metadata
    rg = md.row_group(0)
    big = {rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
           if rg.column(j).total_uncompressed_size > 1 << 20} | {rg.total_byte_size}
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - n
    footer = bytes(data[start:-8])
    for v in big:
        old = _varint(v << 1)
        assert footer.count(old) >= 1, v
        footer = footer.replace(old, _padded_varint(SMALL << 1, len(old)))
    data[start:-8] = footer
    path.write_bytes(bytes(data))
    rg = pq.ParquetFile(path).metadata.row_group(0)
    assert max(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)) <= SMALL
    meta = read_metadata(snap)
    meta["files"][rel] = file_entry(snap, path)
    write_metadata(snap, meta)


def test_a_page_over_the_budget_behind_a_small_footer_is_refused_before_it_is_decoded(tmp_path):
    snap, rel = _bomb(tmp_path)
    _lying_footer(snap, rel)
    peak, message = peak_of(f"""
        import explorer
        s = explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = raised(s.hot_keys)
    """)
    assert message.startswith("SnapshotTooLargeError: "), message
    assert rel in message and "row group 0" in message and "as its header declares" in message, message
    assert "memory_budget=" in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"


def test_pages_declaring_more_than_the_footer_are_corrupt(tmp_path):
    """A page within the budget (a larger one) but past what the footer declared: the footer lied."""
    snap, rel = _bomb(tmp_path)
    _lying_footer(snap, rel)
    with pytest.raises(SnapshotCorruptError, match="pages' headers declare .* the footer 4,096"):
        explorer.open(snap, memory_budget="2GB").hot_keys()


def test_honest_pages_read_as_before(tmp_path):
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    s = explorer.open(snap, memory_budget="64MB")
    assert len(s.keyed_state()) == len(explorer.open(SAMPLE).keyed_state()) > 0


def test_dataset_checks_row_groups_as_every_other_read(tmp_path):
    """Left by session 11: ``snap.dataset()`` handed the files to Arrow unchecked; a scan then decoded the
    200 MiB value under a 64 MB budget. Its row groups are now checked when the dataset is made."""
    snap, rel = _bomb(tmp_path)
    peak, message = peak_of(f"""
        import explorer
        s = explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = raised(lambda: s.dataset(state="session").to_table())
    """)
    assert message.startswith("SnapshotTooLargeError: "), message
    assert rel in message and "row group 0" in message and "memory_budget=" in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"


def test_dataset_refuses_pages_behind_a_lying_footer(tmp_path):
    snap, rel = _bomb(tmp_path)
    _lying_footer(snap, rel)
    with pytest.raises(SnapshotCorruptError, match="pages' headers declare"):
        explorer.open(snap, memory_budget="2GB").dataset(state="session")


def test_dataset_of_honest_files_reads_as_before():
    s = explorer.open(SAMPLE, memory_budget="64MB")
    assert s.dataset(state="session").count_rows() == len(s.keyed_state(state="session")) > 0


def _dictionary_bomb(tmp_path, entry=8 << 20):
    """One 8 MB ``page`` string as the only dictionary entry of its column chunk, referenced by every row
    (a writer that keeps the dictionary however large it grows): a 4.6 KB file, 1.7 GB once decoded. Every
    page declares at most 8 MB."""
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    meta = read_metadata(snap)
    state = meta["operators"][1]["subtasks"][0]["states"][0]
    path = snap / state["file"]
    t = pq.read_table(path)
    value = t.column("value").combine_chunks()
    fields = [value.field(i) if value.type.field(i).name != "page" else pa.array(["a" * entry] * len(value))
              for i in range(value.type.num_fields)]
    t = t.set_column(t.schema.get_field_index("value"), "value",
                     pa.StructArray.from_arrays(fields, fields=list(value.type)))
    path.unlink()
    pq.write_table(t, path, compression="zstd", dictionary_pagesize_limit=1 << 30)
    assert path.stat().st_size < 64 << 10
    meta["files"][state["file"]] = file_entry(snap, path)
    write_metadata(snap, meta)
    return snap, state["file"]


def test_dictionary_pages_that_expand_past_the_budget_are_refused(tmp_path):
    """Found while fixing the page check: pages and footer agree (8 MB), but 215 indexes into an 8 MB dictionary
    entry decode to 1.7 GB: ``hot_keys()`` peaked at 3.2 GiB under 64MB. The dictionary's longest entry times the
    values that index it is checked first."""
    snap, rel = _dictionary_bomb(tmp_path)
    peak, message = peak_of(f"""
        import explorer
        s = explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = raised(s.hot_keys)
    """)
    assert message.startswith("SnapshotTooLargeError: "), message
    assert rel in message and "dictionary" in message and "memory_budget=" in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"


def test_a_dictionary_within_the_budget_reads(tmp_path):
    snap, rel = _dictionary_bomb(tmp_path, entry=1 << 10)
    s = explorer.open(snap, memory_budget="64MB")
    pages = s.keyed_state(state="session")["value"].map(lambda v: v["page"])
    assert (pages == "a" * 1024).sum() == pq.ParquetFile(snap / rel).metadata.num_rows > 0


def test_a_dictionary_of_many_entries_is_read_for_its_longest(tmp_path):
    """The bound without reading the entries (all of the page in one) is over the budget here; the entries read,
    each index costs at most the longest (1 KiB), which fits."""
    from explorer.format import budget
    from explorer.format.parquet_pages import check_page_sizes

    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"v": [f"{i:04d}" + "x" * 1020 for i in range(2000)] * 8}), path, compression="zstd",
                   dictionary_pagesize_limit=1 << 30)
    md = pq.ParquetFile(path).metadata
    with budget.using(budget.FLOOR):  # 16,000 indexes x 2 MB of entries: 32 GB by the bound; 16 MB read
        check_page_sizes(path, md, range(md.num_row_groups))
    with budget.using(budget.FLOOR), pytest.raises(Exception, match="longest entry 1,024 bytes"):
        pq.write_table(pa.table({"v": [f"{i:04d}" + "x" * 1020 for i in range(2000)] * 10}), path,
                       compression="zstd", dictionary_pagesize_limit=1 << 30)
        md = pq.ParquetFile(path).metadata
        check_page_sizes(path, md, range(md.num_row_groups))


def test_fixed_length_values_are_bounded_by_their_width(tmp_path):
    """Left by session 12 (threat model): a FIXED_LEN_BYTE_ARRAY column's dictionary-encoded values were bounded
    by a slot each (8 bytes), and a byte-array dictionary's entries by its page; a fixed-length value decodes to
    its full width. 2,000 indexes into one 1 MiB entry: a ~1 MB file, 2 GB once decoded. The width now comes
    from the footer's schema and bounds every value of the column."""
    from explorer.errors import SnapshotTooLargeError
    from explorer.format import budget
    from explorer.format.parquet_pages import check_page_sizes, footer_chunks

    width, rows = 1 << 20, 2000
    path = tmp_path / "flba.parquet"
    column = pa.array([b"\x01" * width] * rows, pa.binary(width))
    pq.write_table(pa.table({"k": pa.array(range(rows)), "v": column}), path, compression="zstd",
                   dictionary_pagesize_limit=1 << 30)
    assert path.stat().st_size < 2 << 20
    chunks = {c.path_in_schema: c for c in footer_chunks(path)[0].columns}
    assert (chunks["v"].physical_type, chunks["v"].type_length, chunks["k"].type_length) == \
        ("FIXED_LEN_BYTE_ARRAY", width, 0)
    md = pq.ParquetFile(path).metadata
    with budget.using(64 << 20), pytest.raises(SnapshotTooLargeError, match="1,048,576 bytes each") as info:
        check_page_sizes(path, md, range(md.num_row_groups))
    assert str(path) in str(info.value) and "'v'" in str(info.value)
    with budget.using(64 << 20):  # the other column, of integers, reads
        check_page_sizes(path, md, range(md.num_row_groups), columns=["k"])
    with budget.using(4 << 30):  # a budget that holds the values admits them
        check_page_sizes(path, md, range(md.num_row_groups))


def test_a_local_file_is_checked_in_place_and_a_lying_footer_still_refused(tmp_path, monkeypatch):
    """A local file's column chunks are checked from its memory map in place (``read_buffer``: no copy of each
    chunk, which ``read_at`` makes even of a memory map); the same lying footer is still corrupt that way (and a page
    over the budget still refused: the tests above open the snapshot by its path, so through this path too)."""
    from explorer.format.parquet_pages import check_page_sizes, footer_chunks

    mapping = pa.memory_map

    class InPlace:
        """The memory map, without ``read_at`` (which copies)."""

        def __init__(self, *args):
            self._m = mapping(*args)

        def __getattr__(self, name):
            if name == "read_at":
                raise AssertionError("read_at copies the column chunk; a local file is read in place")
            return getattr(self._m, name)

    from explorer.format import budget

    honest = tmp_path / "honest.parquet"
    pq.write_table(pa.table({"k": [f"k{i % 7}" for i in range(5000)], "v": [bytes([i % 251]) * 300 for i in range(5000)]}),
                   honest, row_group_size=1000, data_page_size=4096, use_dictionary=["k"])
    groups = footer_chunks(honest)
    with budget.using(64 << 20), monkeypatch.context() as m:
        m.setattr(pa, "memory_map", InPlace)
        check_page_sizes(honest, groups, range(len(groups)))  # every chunk's headers parsed, the dictionary's too
    snap, rel = _bomb(tmp_path)
    path = snap / rel
    _lying_footer(snap, rel)
    groups = footer_chunks(path)
    with budget.using(2 << 30), monkeypatch.context() as m:
        m.setattr(pa, "memory_map", InPlace)
        with pytest.raises(SnapshotCorruptError, match="pages' headers declare .* the footer 4,096"):
            check_page_sizes(path, groups, range(len(groups)))
