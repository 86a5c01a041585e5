"""The vectorised String.hashCode path equals the scalar one on awkward strings."""

import random

import numpy as np
import pytest

from explorer.keygroups import assign_key_groups, assign_to_key_group, java_hash_code, java_string_hash_codes


def _strings(seed: int, n: int) -> list[str]:
    rs = random.Random(seed)
    fixed = ["", "a", "hello", "ü日本語", "😀x", "𝄞𝄞", "\ud800"]  # incl. astral chars and a lone surrogate
    return fixed + ["".join(chr(rs.choice([rs.randint(32, 126), rs.randint(0x80, 0xD7FF), rs.randint(0x10000, 0x10FFFF)]))
                            for _ in range(rs.randint(0, 60))) for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_string_hash_codes_equal_scalar(seed):
    strs = _strings(seed, 500)
    codes = java_string_hash_codes(strs).view(np.int32)
    assert codes.tolist() == [java_hash_code(s) for s in strs]


@pytest.mark.parametrize("max_parallelism", [1, 7, 128, 4096, 32768])
def test_vectorised_key_groups_of_strings_equal_scalar(max_parallelism):
    strs = _strings(42, 300) * 2  # duplicates go through the unique/inverse path
    got = assign_key_groups(np.array(strs, dtype=object), max_parallelism).tolist()
    assert got == [assign_to_key_group(s, max_parallelism) for s in strs]
