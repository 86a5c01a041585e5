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
