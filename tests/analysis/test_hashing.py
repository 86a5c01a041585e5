"""Vectorised string hashes from Arrow buffers agree with Java's String.hashCode and with themselves."""

import random

import numpy as np
import pyarrow as pa
import pytest

from explorer.analysis._hashing import string_hash64
from explorer.keygroups._vectorised import java_string_hashes, polynomial_hashes
from explorer.keygroups import java_hash_code


def _strings(seed: int, n: int, max_len: int) -> list[str]:
    rnd = random.Random(seed)
    return ["".join(chr(rnd.randrange(32, 127)) for _ in range(rnd.randrange(0, max_len))) for _ in range(n)]


@pytest.mark.parametrize("max_len", [1, 14, 300])  # one length, a few lengths, many lengths (prefix sums)
def test_java_hashes_equal_java_string_hashcode(max_len):
    strs = _strings(max_len, 3000, max_len) + ["", "a", "user-00000001"]
    got = java_string_hashes(pa.array(strs))
    want = [java_hash_code(s) & 0xFFFFFFFF for s in strs]
    assert got.tolist() == want


def test_sliced_and_chunked_arrays_hash_like_their_values():
    strs = _strings(7, 500, 40)
    whole = polynomial_hashes(pa.array(strs), 31)
    sliced = polynomial_hashes(pa.array(strs).slice(100, 200), 31)
    chunked = polynomial_hashes(pa.chunked_array([pa.array(strs[:250]), pa.array(strs[250:])]), 31)
    assert (sliced == whole[100:300]).all()
    assert (chunked == whole).all()
    h = string_hash64(pa.array(strs))
    h2 = string_hash64(pa.chunked_array([pa.array(strs[::-1])]))
    assert (h == h2[::-1]).all()


def test_non_ascii_strings_are_left_to_the_exact_path():
    assert java_string_hashes(pa.array(["abc", "straße"])) is None


def test_hash64_separates_distinct_strings():
    strs = [f"user-{i:08d}" for i in range(200_000)] + ["", "\x00", "\x00\x00"]
    h = string_hash64(pa.array(strs))
    assert len(np.unique(h)) == len(strs)


def test_even_base_is_refused():
    with pytest.raises(ValueError, match="odd"):
        polynomial_hashes(pa.array(["a"]), 32)


@pytest.mark.parametrize("width", [0, 1, 13, 70])
def test_java_hashes_of_one_length(width):
    strs = [s.ljust(width, "x")[:width] for s in _strings(width, 500, width + 1)]
    got = java_string_hashes(pa.array(strs).slice(3))
    assert got.tolist() == [java_hash_code(s) & 0xFFFFFFFF for s in strs[3:]]


@pytest.mark.parametrize("width", [3, 8, 13, 40])
def test_hash64_of_one_width_equals_the_hash_among_other_widths(width):
    """A key hashes alike whether its array holds one width (read in place) or several."""
    same = [s.ljust(width, "y")[:width] for s in _strings(width, 300, width + 1)]
    mixed = same + ["", "ab", "z" * (width + 5)]
    assert (string_hash64(pa.array(same)) == string_hash64(pa.array(mixed))[: len(same)]).all()
    assert (string_hash64(pa.array(same).slice(7)) == string_hash64(pa.array(same))[7:]).all()


@pytest.mark.parametrize("kernel", [False, True])
def test_java_hashes_of_numpy_and_kernel_paths_agree_with_java(monkeypatch, kernel):
    import explorer.keygroups._vectorised as hashing

    monkeypatch.setattr(hashing, "KERNEL_STRINGS", 1 if kernel else 1 << 40)
    strs = [s for w in (0, 1, 7, 13, 40) for s in _strings(w, 60, w + 1)] + ["", "user-00000001"]
    got = java_string_hashes(pa.array(strs).slice(2))
    assert got.tolist() == [java_hash_code(s) & 0xFFFFFFFF for s in strs[2:]]
    assert java_string_hashes(pa.array(["abc", "straße"])) is None
