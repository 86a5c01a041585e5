"""The compiled page-header walk (``format/_page_kernels.py``) against the Python parser it stands in for.

The Python parser (``parquet_pages._walk_python``) is the reference: on every column chunk of files pyarrow
writes (page v1 and v2, checksums, statistics, dictionaries, nulls, lists, codecs) and on thousands of damaged
copies of them (bytes flipped, cut short), the compiled walk must read the very same pages and fields, or leave
the chunk to the Python parser (None); it may never accept a chunk the Python parser refuses. Then the checks
built on the walk (``check_page_sizes``) must refuse the same damaged files with the same words either way.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from explorer.errors import StateExplorerError
from explorer.format import _page_kernels as K
from explorer.format import budget, parquet_pages
from explorer.format.parquet_pages import (
    _Corrupt, _headers, _pages_python, _walk_python, check_page_sizes, footer_chunks,
)
from tests.security.test_memory_parquet_pages import _dictionary_bomb, _lying_footer
from tests.security.test_memory_engine_parquet import _bomb


def _table(n: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    return pa.table({
        "key_group": pa.array([i % 128 for i in range(n)], pa.int32()),
        "key": pa.array([f"user-{rng.randrange(n // 3 + 1):06d}" for _ in range(n)]),
        "value": pa.array([None if i % 7 == 0 else rng.randrange(1 << 40) for i in range(n)], pa.int64()),
        "blob": pa.array([bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(n)], pa.binary()),
        "tags": pa.array([[f"t{j}" for j in range(i % 4)] if i % 5 else None for i in range(n)], pa.list_(pa.string())),
        "flag": pa.array([i % 3 == 0 for i in range(n)]),
        "fixed": pa.array([bytes([i % 256]) * 6 for i in range(n)], pa.binary(6)),
    })


#: the writers' options the files are made with: every header shape pyarrow writes
LAYOUTS = [
    {},
    {"data_page_version": "2.0"},
    {"write_page_checksum": True, "data_page_size": 2048},
    {"write_statistics": True, "data_page_size": 1024},
    {"write_statistics": True, "data_page_version": "2.0", "compression": "zstd"},
    {"compression": "snappy", "use_dictionary": False, "data_page_size": 512},
    {"compression": "none", "data_page_size": 1, "write_batch_size": 16, "write_page_checksum": True},
    {"compression": "gzip", "write_page_index": True, "data_page_size": 4096},
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("pages")
    out = []
    for k, options in enumerate(LAYOUTS):
        path = folder / f"{k}.parquet"
        pq.write_table(_table(1500, k), path, row_group_size=700, **options)
        out.append(path)
    return out


def _chunks(path) -> list[bytes]:
    """Every column chunk's bytes (dictionary page first)."""
    raw = path.read_bytes()
    found = []
    for group in footer_chunks(path):
        for c in group.columns:
            start = c.dictionary_page_offset if c.has_dictionary_page and c.dictionary_page_offset else \
                c.data_page_offset
            found.append(raw[start:start + c.total_compressed_size])
    return found


def _python(data: bytes):
    try:
        return [(pos, body, head) for pos, body, head in _walk_python(np.frombuffer(data, np.uint8), 0)]
    except _Corrupt:
        return None


def _compiled(data: bytes):
    sums = np.zeros(K.SUMS, dtype=np.int64)
    rows = _headers(K, data, 0, len(data), sums)
    if rows is None:
        return None
    pages = [(int(r[K.HEADER]), int(r[K.BODY]),
              {name: int(r[K.TYPE + j]) for j, name in enumerate(K.NAMES) if r[K.TYPE + j] != K.ABSENT}) for r in rows]
    # what the page check adds up, against _pages_python's own sums of the same pages
    want = _pages_python(np.frombuffer(data, np.uint8), 0, "x")
    got = sums.tolist()
    assert (got[K.S_BYTES], got[K.S_VALUES], got[K.S_INDEXED]) == want[:3]
    assert (tuple(got[K.S_DICT_BODY:]) if got[K.S_DICTIONARY] else None) == want[3]
    assert got[K.S_LARGEST] == max([head["uncompressed"] for _, _, head in pages], default=0)
    return pages


def _agree(data: bytes) -> str:
    """How the two walks of ``data`` came out (asserting that they agree): 'read', 'refused', or 'left' (the
    compiled walk left to the Python parser a chunk it reads, with a value past 32 bits)."""
    want, got = _python(data), _compiled(data)
    if want is None:
        assert got is None, f"the compiled walk read a chunk the Python parser refuses: {data.hex()}"
        return "refused"
    if got is None:
        assert any(not -(1 << 31) <= v < 1 << 31 for _, _, head in want for v in head.values()), \
            f"the compiled walk left a chunk of 32-bit values to the Python parser: {want}"
        return "left"
    assert got == want
    return "read"


def test_undamaged_chunks_are_read_alike(files):
    pages = 0
    for path in files:
        for data in _chunks(path):
            assert _agree(data) == "read"
            pages += len(_python(data))
    assert pages > 900  # many small pages, dictionary pages, checksums, statistics among them


def test_many_pages_fill_the_output_again_and_again():
    """More pages than the first output holds (64 rows): the walk resumes where it stopped."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"v": list(range(5000))}), sink, data_page_size=1, write_batch_size=4, use_dictionary=False,
                   compression="none", write_statistics=False)
    path = pa.py_buffer(sink.getvalue())
    f = pq.ParquetFile(path)
    col = f.metadata.row_group(0).column(0)
    data = sink.getvalue().to_pybytes()[col.data_page_offset:col.data_page_offset + col.total_compressed_size]
    rows = _headers(K, data, 0, len(data), np.zeros(K.SUMS, dtype=np.int64))
    assert len(rows) > 1000 and _agree(data) == "read"


@pytest.mark.parametrize("seed", range(4))
def test_damaged_chunks_are_read_alike_or_refused_alike(files, seed):
    """Bytes flipped (one to three, anywhere in a chunk, often in its headers), set to Thrift's type nibbles and
    varint continuations, and chunks cut short: the same pages and fields, or both refused."""
    rng = random.Random(seed)
    chunks = [c for path in files for c in _chunks(path)]
    seen = {"read": 0, "refused": 0, "left": 0}
    for _ in range(1500):
        data = bytearray(rng.choice(chunks))
        how = rng.randrange(4)
        if how == 3:  # cut short
            data = data[:rng.randrange(len(data))]
        else:
            # mostly near a header (the first 64 bytes of the chunk or of a page), where the damage parses
            for _ in range(how + 1):
                at = rng.randrange(min(len(data), 64)) if rng.random() < 0.7 else rng.randrange(len(data))
                data[at] = rng.choice([rng.randrange(256), data[at] ^ (1 << rng.randrange(8)), 0x80 | data[at],
                                       (data[at] & 0xF0) | rng.randrange(16), 0xFF, 0x00])
        seen[_agree(bytes(data))] += 1
    print(seen)
    assert seen["refused"] > 100 and seen["read"] > 100, seen


def _header(fields: bytes) -> bytes:
    """A PageHeader of type 0, 4 bytes either way, then ``fields`` (raw Thrift compact bytes), then a stop."""
    return bytes([0x15, 0x00, 0x15, 0x08, 0x15, 0x08]) + fields + b"\x00" + b"\x01\x00\x00\x00"


@pytest.mark.parametrize("fields", [
    b"\x1c" + b"\x1c" * 40 + b"\x00" * 41,  # structs nested 42 deep in a data page header: refused (32 at most)
    b"\x1c" + b"\x1c" * 30 + b"\x00" * 31,  # 32 deep: read
    b"\x19\xf5\xff\xff\xff\x0f",  # a list of 2**32 - 1 bytes in a few bytes
    b"\x1b\xff\xff\xff\x0f\x33",  # a map as large
    b"\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # a string of a length past 2**64
    b"\x15\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # a varint of 11 bytes
    b"\x15\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a field of 2**64 - 1 (a 10-byte varint)
    b"\x05\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x00",  # a field id past 2**64
    b"\x05\x8a\x80\x80\x80\x80\x80\x80\x80\x80\x00\x00",  # a field id written long (10 bytes, value 5)
    b"\x0c\x09\x00\x15\x03\x00",  # field id 4 written as a zigzag varint (-5), then a delta of 9: field 5 (v1)
    b"\x1d\x00",  # Thrift type 13
    b"\x17" + b"\x00" * 8,  # a double
    b"\x17" + b"\x00" * 4,  # a double cut short
    b"\x1a\x00",  # an empty set
    b"\x1b\x00",  # an empty map (no key/value type byte)
    b"\x1b\x02\x57\x02" + b"\x00" * 8 + b"\x04" + b"\x00" * 8,  # a map of two i32 keys to doubles
    b"\x1b\x01\x83\x02ab\x05",  # a map of one string key to a byte
    b"\x19\x10",  # a list of one element of type 0
    b"\x19\x01",  # an empty list of elements of type 1
    b"\x19\x21\x01\x02",  # a list of two booleans (a byte each)
    b"\x15\x04",  # the uncompressed size again (2): the last one counts
    b"\x5c\x15\x06\x25\x10\x00",  # a data page header: 3 values, RLE_DICTIONARY
    b"\x7c\x15\xff\xff\xff\xff\x0f\x00",  # a dictionary page header of 2**31 entries: past 32 bits
    b"\x8c\x71\x00",  # a v2 header saying is_compressed true
    b"\x8c\x72\x00",  # false
])
def test_hand_written_headers(fields):
    data = _header(fields)
    _agree(data)
    _agree(data[:-1])


@pytest.mark.parametrize("depth", range(28, 38))
def test_nesting_at_and_around_the_limit(depth):
    """Structs, lists and maps nested ``depth`` deep (the Python parser skips at most 32 deep)."""
    _agree(_header(b"\x1c" * depth + b"\x00" * depth))
    _agree(_header(b"\x1c" * depth + b"\x11" + b"\x00" * depth))  # a boolean field innermost
    _agree(_header(b"\x19\x1c" * depth + b"\x00" * depth))  # lists of one struct
    _agree(_header(b"\x1b\x01\x3c\x00" * depth + b"\x00" * depth))  # maps of a byte to a struct


def test_the_first_of_two_dictionary_pages_counts():
    def page(entries: int) -> bytes:  # a dictionary page header (type 2, field 7: its entries), 4 bytes of body
        return bytes([0x15, 0x04, 0x15, 0x08, 0x15, 0x08, 0x4c, 0x15, entries * 2, 0x00, 0x00]) + b"\0" * 4

    assert _agree(page(3) + page(5)) == "read"
    assert _compiled(page(3) + page(5))[1][2]["dict_values"] == 5


def test_a_missing_required_field_is_left_to_the_python_parser():
    assert _compiled(bytes([0x15, 0x00, 0x15, 0x08, 0x00])) is None and _python(bytes([0x15, 0x00, 0x15, 0x08, 0x00])) \
        is None


def _outcome(fn):
    try:
        fn()
    except StateExplorerError as exc:
        return type(exc).__name__, str(exc)
    return None


@pytest.fixture(params=["python", "numba"])
def walk(request, monkeypatch):
    monkeypatch.setattr(parquet_pages, "WALK", request.param)
    monkeypatch.setattr(parquet_pages, "_PASSED", set())  # every chunk checked again
    return request.param


def _check(path, limit):
    md = footer_chunks(path)
    with budget.using(limit):
        check_page_sizes(path, md, range(len(md)))


def test_check_page_sizes_refuses_alike_either_way(tmp_path, monkeypatch):
    """The page bombs of ``tests/security`` and damaged copies of honest files, checked with each walk: the
    same error (class and words, naming the file, what was found and what was expected) or none."""
    cases = []
    snap, rel = _bomb(tmp_path / "a")
    cases.append((snap / rel, 64 << 20))  # a page over the budget
    snap, rel = _bomb(tmp_path / "b")
    _lying_footer(snap, rel)
    cases.append((snap / rel, 2 << 30))  # pages declaring more than the footer
    snap, rel = _dictionary_bomb(tmp_path / "c")
    cases.append((snap / rel, 64 << 20))  # a dictionary that expands past the budget
    honest = tmp_path / "honest.parquet"
    pq.write_table(_table(3000, 9), honest, row_group_size=1000, data_page_size=512, write_page_checksum=True)
    cases.append((honest, 64 << 20))
    rng = random.Random(5)
    raw = honest.read_bytes()
    md = footer_chunks(honest)
    starts = [c.dictionary_page_offset or c.data_page_offset for g in md for c in g.columns]
    for k in range(60):
        data = bytearray(raw)
        at = rng.choice(starts) + rng.randrange(24)
        data[at] = rng.randrange(256)
        path = tmp_path / f"damaged-{k}.parquet"
        path.write_bytes(bytes(data))
        cases.append((path, 64 << 20))
    outcomes = {}
    for mode in ("python", "numba"):
        monkeypatch.setattr(parquet_pages, "WALK", mode)
        monkeypatch.setattr(parquet_pages, "_PASSED", set())
        outcomes[mode] = [_outcome(lambda: _check(path, limit)) for path, limit in cases]
    assert outcomes["numba"] == outcomes["python"]
    first = outcomes["python"]
    assert first[0][0] == "SnapshotTooLargeError" and "as its header declares" in first[0][1]
    assert first[1][0] == "SnapshotCorruptError" and "pages' headers declare" in first[1][1]
    assert first[2][0] == "SnapshotTooLargeError" and "dictionary" in first[2][1]
    assert first[3] is None
    assert sum(o is not None for o in first[4:]) > 10  # damaged headers refused (naming the file)
    assert all(str(path) in o[1] for (path, _), o in zip(cases, first) if o is not None)


def test_the_default_walk_turns_compiled_after_a_small_snapshot(monkeypatch, tmp_path):
    """A process walks its first pages with the Python parser (no numba for a small snapshot), then the compiled
    walk where numba's cache holds it."""
    monkeypatch.setattr(parquet_pages, "WALK", None)
    monkeypatch.setattr(parquet_pages, "_python_pages", [0])
    assert parquet_pages._walker() is None
    monkeypatch.setattr(parquet_pages, "_python_pages", [parquet_pages.PYTHON_PAGES])
    monkeypatch.setattr(parquet_pages, "_kernel_cached", [])
    parquet_pages.warm_headers()  # (what ``python -m explorer.kernels --warm`` runs at install)
    assert parquet_pages._walker() is K


def _longest_python(page: bytes, count: int):
    at, longest = 0, 0
    for _ in range(count):
        if at + 4 > len(page):
            return -1
        n = int.from_bytes(page[at:at + 4], "little")
        longest = max(longest, n)
        at += 4 + n
    return longest if at == len(page) else -1


def test_the_longest_dictionary_entry_as_the_python_walk_finds_it():
    rng = random.Random(3)
    for _ in range(400):
        entries = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 5, 40, 300]))) for _ in range(rng.randrange(1, 60))]
        page = bytearray(b"".join(len(e).to_bytes(4, "little") + e for e in entries))
        count = len(entries) + rng.choice([0, 0, 0, -1, 1])
        if rng.random() < 0.3 and page:
            page[rng.randrange(len(page))] = rng.randrange(256)
        if rng.random() < 0.2:
            page = page[:rng.randrange(len(page) + 1)]
        page = bytes(page)
        assert K.longest_entry(np.frombuffer(page, np.uint8), max(count, 0)) == _longest_python(page, max(count, 0))


@pytest.mark.parametrize("longest", [100, 3000])
def test_a_dictionary_of_more_entries_than_the_python_walk_takes(tmp_path, longest):
    """More than 4,096 entries: the compiled walk finds the longest; 20,000 indexes of 3,000-byte entries (60 MB)
    are over a 16 MB budget, of 100-byte ones (2 MB) within it (the page bound alone, ~60 MB of entries, is not)."""
    path = tmp_path / "d.parquet"
    values = [f"{i:05d}" + "x" * (rng_len - 5) for i, rng_len in zip(range(5000), [longest] + [60] * 4999)] * 4
    pq.write_table(pa.table({"v": values}), path, compression="zstd", dictionary_pagesize_limit=1 << 30)
    md = footer_chunks(path)
    with budget.using(budget.FLOOR):
        if longest == 100:
            check_page_sizes(path, md, range(len(md)))
        else:
            with pytest.raises(Exception, match=f"longest entry {longest:,} bytes"):
                check_page_sizes(path, md, range(len(md)))
