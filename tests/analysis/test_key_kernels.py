"""The numba key numbering gives Arrow's dictionary_encode codes and dictionary, bucket by bucket."""

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from explorer.analysis import _columns
from explorer.analysis._key_kernels import BAD_OFFSETS, encode_strings


def _arrow(chunks, t):
    enc = pc.dictionary_encode(pa.chunked_array(chunks, type=t))
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False).astype(np.int64) for c in enc.chunks])
    return codes, enc.chunk(0).dictionary


def _keys(seed: int, n: int, distinct: int) -> list[str]:
    rnd = random.Random(seed)
    pool = ["".join(chr(rnd.randrange(32, 127)) for _ in range(rnd.randrange(0, 30))) for _ in range(distinct)]
    pool += ["", "a", "user-000000001", "straße", "x" * 300]
    return [pool[rnd.randrange(len(pool))] for _ in range(n)]


@pytest.mark.parametrize("t", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
@pytest.mark.parametrize("distinct", [1, 50, 5000])
def test_codes_and_dictionary_equal_arrows(monkeypatch, t, distinct):
    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    keys = _keys(distinct, 20_000, distinct)
    # runs of one key (a list state's entries), a sliced chunk, repeats across chunks
    keys[100:140] = [keys[100]] * 40
    chunks = [pa.array(keys[:7000], type=t), pa.array(keys, type=t).slice(7000, 9000), pa.array(keys[16000:], type=t)]
    got = _columns._numbered_strings(chunks, t)
    assert got is not None
    codes, dictionary = _arrow(chunks, t)
    assert np.array_equal(got[0], codes)
    assert len(got[1]) == len(dictionary) and got[1].build().equals(dictionary)


def test_many_buckets_and_one_bucket_give_the_same_codes():
    arr = pa.array(_keys(3, 50_000, 30_000))
    from explorer.analysis._diff_kernels import hash_strings
    from explorer.keygroups import string_buffers

    off, data = string_buffers(arr)
    h = np.empty(len(arr), np.uint64)
    assert hash_strings(off, data, h)
    out = []
    for bits in (0, 3, 10):
        codes, first = np.empty(len(arr), np.int64), np.empty(len(arr), np.int64)
        k = encode_strings(off, data, h, bits, codes, first)
        out.append((k, codes.copy(), first[:k].copy()))
    assert all(o[0] == out[0][0] and (o[1] == out[0][1]).all() and (o[2] == out[0][2]).all() for o in out)
    want, _ = _arrow([arr], arr.type)
    assert (out[0][1] == want).all()


def test_offsets_outside_the_data_are_refused_unread():
    off = np.array([0, 3, 99], dtype=np.int32)
    data = np.zeros(10, np.uint8)
    h = np.zeros(2, np.uint64)
    assert encode_strings(off, data, h, 0, np.empty(2, np.int64), np.empty(2, np.int64)) == BAD_OFFSETS


def test_nulls_few_rows_and_other_types_stay_on_arrows_path(monkeypatch):
    assert _columns._numbered_strings([pa.array(["a", "b"])], pa.string()) is None  # few rows
    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    assert _columns._numbered_strings([pa.array(["a", None])], pa.string()) is None
    assert _columns._numbered_strings([pa.array([1, 2])], pa.int64()) is None
    codes, kv = _columns._encode_keys([pa.chunked_array([pa.array(["b", "a", "b"])]), pa.chunked_array([pa.array([5, 6])]),
                                       pa.chunked_array([pa.array(["a", "c"])])])
    assert codes.tolist() == [0, 1, 0, 3, 4, 1, 2]
    assert list(kv.take(codes)) == ["b", "a", "b", 5, 6, "a", "c"]


@pytest.mark.parametrize("t", [pa.binary(), pa.large_string()])
def test_keys_told_apart_by_length_and_bytes_past_the_first_sixteen(monkeypatch, t):
    """Keys of 16 bytes or fewer are compared by their packed first 16 bytes and length, longer ones byte by
    byte past those: zero bytes, equal prefixes, lengths 7-9 and 15-17, a tail differing at its last byte."""
    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    base = [b"", b"\x00", b"\x00\x00", b"ab", b"ab\x00", b"ab\x00\x00", b"user-000000001", b"user-000000001\x00",
            b"x" * 7, b"x" * 8, b"x" * 9, b"x" * 15, b"x" * 16, b"x" * 17, b"x" * 16 + b"\x00", b"x" * 16 + b"y",
            b"y" * 40, b"y" * 39 + b"z", b"0123456789abcdef", b"0123456789abcdeg", b"\xff" * 16, b"\xff" * 8]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        base = [b for b in base if b != b"\xff" * 16 and b != b"\xff" * 8]
    rnd = random.Random(7)
    keys = [base[rnd.randrange(len(base))] for _ in range(5000)]
    keys[10:30] = [keys[10]] * 20  # a run
    arr = pa.array([k if pa.types.is_binary(t) else k.decode() for k in keys], type=t)
    got = _columns._numbered_strings([arr], t)
    assert got is not None
    codes, dictionary = _arrow([arr], t)
    assert np.array_equal(got[0], codes)
    assert got[1].build().equals(dictionary)
    assert len(dictionary) == len(base)


def test_few_keys_taken_and_looked_up_in_the_source_as_in_the_gathered_dictionary(monkeypatch):
    """A kernel-numbered range's dictionary is not gathered to take a few keys or find a few keys' codes: the
    answers are those of the gathered dictionary (first of repeated keys asked, absent keys -1, keys of
    another type through the dictionary)."""
    from explorer.analysis._keys import Deferred, KeyValues

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    keys = _keys(11, 20_000, 3000)
    arr = pa.array(keys)
    codes, seg, _ = _columns._numbered_strings([arr], pa.string())
    assert isinstance(seg, Deferred) and seg.source is not None
    lazy, built = KeyValues([seg]), KeyValues([seg.build()])
    pick = np.array([0, 5, len(seg) - 1, 5, 17, 2999 % len(seg)], dtype=np.int64)
    assert list(lazy.take(pick)) == list(built.take(pick))
    assert isinstance(lazy._segments[0], Deferred)  # not gathered
    asked = [keys[0], keys[19_999], "no such key", keys[0], keys[123], "", "user-000000001"]
    assert lazy.codes_of(asked).tolist() == built.codes_of(asked).tolist()
    assert isinstance(lazy._segments[0], Deferred)
    found = lazy.codes_of(asked)
    assert found[0] == codes[0] and found[1] == codes[19_999] and found[2] == -1
    assert list(lazy.take(found[found >= 0])) == [k for k, c in zip(asked, found) if c >= 0]
    with pytest.raises(IndexError):
        lazy.take(np.array([len(seg)]))
    assert lazy.codes_of([5, "a"]).tolist() == built.codes_of([5, "a"]).tolist()  # (not strings: gathered)


@pytest.mark.parametrize("width", [14, 16, 17])
@pytest.mark.parametrize("hashes", ["constant", "top_bits_only", "real"])
def test_equal_length_keys_whose_hashes_collide_get_arrows_codes(width, hashes):
    """Equal-length keys (short ones compared as packed words and length, longer byte by byte) under hashes that
    collide entirely or share their bucket prefix and table slot: still one code per distinct key, Arrow's."""
    from explorer.analysis._diff_kernels import hash_strings
    from explorer.keygroups import string_buffers

    rnd = random.Random(width)
    pool = [f"user-{rnd.randrange(10**9):09d}".ljust(width, "z")[:width] for _ in range(700)]
    pool += ["a" * (width - 1) + "b", "a" * (width - 1) + "c", "b" + "a" * (width - 1), "\x00" * width,
             "\x00" * (width - 1) + "\x01"]
    keys = [pool[rnd.randrange(len(pool))] for _ in range(6000)]
    keys[50:80] = [keys[50]] * 30
    arr = pa.array(keys)
    off, data = string_buffers(arr)
    h = np.empty(len(arr), np.uint64)
    assert hash_strings(off, data, h)
    if hashes == "constant":
        h[:] = np.uint64(0xDEADBEEF) << np.uint64(32)
    elif hashes == "top_bits_only":  # buckets differ, every slot within a bucket the same
        h &= np.uint64(0xF000000000000000)
    want, dictionary = _arrow([arr], arr.type)
    for bits in (0, 2, 4):
        codes, first = np.empty(len(arr), np.int64), np.empty(len(arr), np.int64)
        k = encode_strings(off, data, h, bits, codes, first)
        assert k == len(dictionary) == len(set(keys))
        assert np.array_equal(codes, want)
        assert arr.take(pa.array(first[:k])).equals(dictionary)


@pytest.mark.parametrize("t", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_key_hashes_carried_from_the_numbering_equal_the_dictionarys_own(monkeypatch, t):
    """The diff joins on the hashes the numbering computed per row (taken at each key's first row): they must be
    string_hash64 of the gathered dictionary, key for key, short keys and long, in one chunk or several."""
    from explorer.analysis._hashing import string_hash64

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    keys = _keys(5, 12_000, 900)
    chunks = [pa.array(keys[:5000], type=t), pa.array(keys[5000:], type=t)]
    codes, kv = _columns._encode_keys([pa.chunked_array(chunks)])
    assert kv.has_hash64()
    carried = kv.hash64().copy()
    kv.forget()
    assert not kv.has_hash64()
    assert np.array_equal(carried, string_hash64(kv.segments[0]))
    assert np.array_equal(carried, kv.hash64())


# --- pieces sorted by key group and key: numbered by a merge (number_sorted), checked, never trusted ---------

def _sorted_pieces(seed: int, n_pieces: int, rows: int, t: pa.DataType, runs: bool = True, first_all: bool = False):
    """Pieces each sorted by (key group, key bytes): keys from a shared pool (some in one piece only), each
    key in its one key group, list-like runs of one key, empty and non-ASCII keys."""
    rnd = random.Random(seed)
    pool = sorted({"".join(chr(rnd.choice([rnd.randrange(32, 127), rnd.randrange(0xA0, 0x3000)]))
                           for _ in range(rnd.randrange(0, 20))) for _ in range(rows)} | {"", "a", "a\x00", "ab"})
    group = {k: rnd.randrange(7) for k in pool}
    pieces = []
    for p in range(n_pieces):
        mine = [k for k in pool if (p == 0 and first_all) or rnd.random() < (0.9 if p == 0 else 0.3)]
        rows_ = []
        for k in mine:
            rows_ += [k] * (rnd.randrange(1, 5) if runs and rnd.random() < 0.3 else 1)
        rows_.sort(key=lambda k: (group[k], k.encode()))
        pieces.append(rows_)
    enc = (lambda k: k.encode()) if pa.types.is_binary(t) or pa.types.is_large_binary(t) else (lambda k: k)
    columns = [pa.chunked_array([pa.array([enc(k) for k in rows_], type=t)], type=t) for rows_ in pieces]
    kg = np.array([group[k] for rows_ in pieces for k in rows_], dtype=np.int32)
    return columns, kg, group


def _both_ways(columns, kg):
    """(codes, rows, hashes) numbered with the key groups (the merge, when it applies) and without (the hash
    table)."""
    out = []
    for groups in (kg, None):
        codes, kv = _columns._encode_keys(columns, groups)
        seg = kv._segments[0]
        out.append((codes, seg.rows, kv.hash64() if kv.has_hash64() else None, seg))
    return out


@pytest.mark.parametrize("t", [pa.string(), pa.large_string(), pa.binary()])
@pytest.mark.parametrize("n_pieces", [1, 2, 5])
@pytest.mark.parametrize("first_all", [False, True])
def test_sorted_pieces_merged_give_the_hash_tables_codes_rows_and_hashes(monkeypatch, t, n_pieces, first_all):
    """Pieces sorted by (key group, key bytes), keys shared between pieces or in one only, runs of one key,
    empty and non-ASCII keys, a key and the same key plus a zero byte, the first piece holding every key or
    not: the merge gives the hash table's codes (Arrow's numbering), first rows and key hashes."""
    from explorer.analysis import _key_kernels

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    calls = []
    merge = _key_kernels.number_sorted
    monkeypatch.setattr(_key_kernels, "number_sorted", lambda *a: calls.append(merge(*a)) or calls[-1])
    columns, kg, _ = _sorted_pieces(n_pieces, n_pieces, 3000, t, first_all=first_all)
    (c1, r1, h1, s1), (c2, r2, h2, s2) = _both_ways(columns, kg)
    assert calls and calls[0] > 0  # the merge numbered them
    want, dictionary = _arrow([c for col in columns for c in col.chunks], t)
    assert np.array_equal(c1, want) and np.array_equal(c2, want)
    assert np.array_equal(r1, r2) and np.array_equal(h1, h2)
    assert s1.build().equals(dictionary)


def test_pieces_out_of_order_are_numbered_by_the_hash_table(monkeypatch):
    """A piece whose keys fall within a key group, or whose key groups fall: UNSORTED, and the hash table's
    codes (the same answer)."""
    from explorer.analysis import _key_kernels
    from explorer.keygroups import string_buffers

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    columns, kg, _ = _sorted_pieces(3, 2, 2000, pa.string())
    n0 = len(columns[0])
    for damage in ("key", "group"):
        cols, groups = list(columns), kg.copy()
        keys = cols[0].to_pylist()
        if damage == "key":  # two neighbours of one key group swapped
            i = next(i for i in range(n0 - 1) if groups[i] == groups[i + 1] and keys[i] != keys[i + 1])
            keys[i], keys[i + 1] = keys[i + 1], keys[i]
            cols[0] = pa.chunked_array([pa.array(keys)])
        else:  # the last row's key group before the first's
            groups[n0 - 1] = -1
        off, data = string_buffers(pa.concat_arrays([c for col in cols for c in col.chunks]))
        starts = np.array([0, n0, len(groups)], dtype=np.int64)
        n = len(groups)
        assert _key_kernels.number_sorted(off, data, groups, starts, np.empty(n, np.int64),
                                          np.empty(n, np.int64)) == _key_kernels.UNSORTED
        (c1, r1, h1, _), (c2, r2, h2, _) = _both_ways(cols, groups)
        want, _ = _arrow([c for col in cols for c in col.chunks], pa.string())
        assert np.array_equal(c1, want) and np.array_equal(r1, r2) and np.array_equal(h1, h2)


def test_a_key_in_two_key_groups_is_one_code_as_in_the_hash_table(monkeypatch):
    """Damaged files can put one key in two key groups: the merge numbers it twice (one per key group), the
    repeated hash sends the range to the hash table, which gives it one code, as before."""
    from explorer.analysis import _key_kernels

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    keys = ["a", "b", "c", "a", "d"]  # "a" in key groups 1 and 2, each group sorted
    groups = np.array([1, 1, 1, 2, 2], dtype=np.int64)
    cols = [pa.chunked_array([pa.array(keys)])]
    from explorer.keygroups import string_buffers

    off, data = string_buffers(pa.array(keys))
    codes, first = np.empty(5, np.int64), np.empty(5, np.int64)
    assert _key_kernels.number_sorted(off, data, groups, np.array([0, 5]), codes, first) == 5  # (two "a")
    (c1, r1, h1, _), (c2, _, _, _) = _both_ways(cols, groups)
    assert c1.tolist() == c2.tolist() == [0, 1, 2, 0, 3]
    assert not _key_kernels.distinct_hashes(np.array([5, 9, 5], dtype=np.uint64), 0)
    assert _key_kernels.distinct_hashes(np.arange(100_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15), 3)


def test_number_sorted_refuses_bad_offsets_and_bounds_unread():
    from explorer.analysis._key_kernels import number_sorted

    data = np.zeros(10, np.uint8)
    kg = np.zeros(2, np.int64)
    out = (np.empty(2, np.int64), np.empty(2, np.int64))
    assert number_sorted(np.array([0, 3, 99], np.int32), data, kg, np.array([0, 2]), *out) == BAD_OFFSETS
    assert number_sorted(np.array([0, 3, 4], np.int32), data, kg, np.array([0, 3]), *out) == BAD_OFFSETS
    assert number_sorted(np.array([0, 3, 4], np.int32), data, kg, np.array([0, 2, 1, 2]), *out) == BAD_OFFSETS
    assert number_sorted(np.array([0, 3, 4], np.int32), data, kg[:1], np.array([0, 2]), *out) == BAD_OFFSETS


def test_order_of_keys_is_bytes_then_length():
    """The merge's comparison: bytes as unsigned (UTF-8's order is the code points'), a prefix first, words
    of 8 and the overlapping last word, a difference at any byte."""
    from explorer.analysis._key_kernels import number_sorted
    from explorer.keygroups import string_buffers

    words = sorted({b"", b"\x00", b"\x00\x01", b"a", b"a\x00", b"a\xff", b"ab", b"abcdefg", b"abcdefgh",
                    b"abcdefgh\x00", b"abcdefghi", b"abcdefgi", b"abcdefghijklmnop", b"abcdefghijklmnoq",
                    b"abcdefghijklmnopq", b"b", b"\x7f" * 9, b"\x80", b"\xff" * 7, b"\xff" * 8, b"\xff" * 17})
    rnd = random.Random(1)
    for _ in range(200):
        i, j = sorted(rnd.sample(range(len(words)), 2))
        for pair, sortedness in (([words[i], words[j]], True), ([words[j], words[i]], False)):
            off, data = string_buffers(pa.array(pair, type=pa.binary()))
            k = number_sorted(off, data, np.zeros(2, np.int64), np.array([0, 2]), np.empty(2, np.int64),
                              np.empty(2, np.int64))
            assert (k == 2) is sortedness and (k < 0) is not sortedness


@pytest.mark.parametrize("collide", [False, True])
def test_few_keys_found_by_their_kept_hashes_as_in_the_gathered_dictionary(monkeypatch, collide):
    """A numbered range keeps its keys' hashes: a sketch's few keys are found through them (each confirmed by
    its value), with the gathered dictionary's answers: repeated and absent keys, empty and non-ASCII keys,
    keys of another type; hashes that all collide cost comparisons, not wrong codes."""
    from explorer.analysis import _keys as keys_module
    from explorer.analysis._keys import KeyValues

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    keys = _keys(13, 20_000, 3000) + ["", "straße", "ключ"]
    codes, kv = _columns._encode_keys([pa.chunked_array([pa.array(keys)])])
    assert kv.has_hash64()
    if collide:  # every key and every key asked: one hash
        kv._key_groups["hash64"] = np.zeros(len(kv), dtype=np.uint64)
        monkeypatch.setattr(keys_module, "string_hash64", lambda a: np.zeros(len(a), dtype=np.uint64))
    built = KeyValues([kv._segments[0].build()])
    used = []
    by_hash = keys_module._codes_by_hash
    monkeypatch.setattr(keys_module, "_codes_by_hash", lambda *a: used.append(by_hash(*a)) or used[-1])
    asked = [keys[0], keys[19_999], "no such key", keys[0], "", "straße", "ключ", keys[77], "user-000000001"]
    got = kv.codes_of(asked)
    assert used == [True]
    assert got.tolist() == built.codes_of(asked).tolist()
    assert got[2] == -1 and got[0] == codes[0] and got[3] == -1  # (asked twice: found the first time)
    assert list(kv.take(got[got >= 0])) == [k for k, c in zip(asked, got) if c >= 0]
    assert kv.codes_of([5, "a"]).tolist() == built.codes_of([5, "a"]).tolist()  # another type: not by hash
