"""explorer.ranking.nth_largest against np.partition, on the shapes hot-key data has."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.ranking import nth_largest


def _expected(v: np.ndarray, n: int):
    return np.partition(v, len(v) - n)[len(v) - n]


def _cases():
    rng = np.random.default_rng(19)
    mostly_alike = np.full(400_000, 8, np.int64)
    mostly_alike[rng.choice(len(mostly_alike), 10, replace=False)] = 168
    big_alike = np.full(400_000, 10**12, np.int64)  # past the histogram: the sampled threshold
    big_alike[rng.choice(len(big_alike), 7, replace=False)] = 10**13 + rng.integers(0, 5, 7)
    return {
        "small ints, two values, 10 above": mostly_alike,
        "large ints, 7 above": big_alike,
        "large ints, random": rng.integers(0, 2**40, 300_000),
        "floats, random": rng.random(300_000),
        "floats, ties at the top": np.concatenate([np.full(50, 9.5), rng.random(299_950)]),
        "negative ints": rng.integers(-1000, 1000, 300_000),
        "short": rng.integers(0, 50, 37),
        "all equal": np.full(300_000, 3.0),
    }


@pytest.mark.parametrize("name", list(_cases()))
@pytest.mark.parametrize("n", [1, 3, 10, 11, 1000])
def test_nth_largest_equals_the_partition(name, n):
    v = _cases()[name]
    n = min(n, len(v))
    got = nth_largest(v, n)
    assert got == _expected(v, n)
    assert type(got) is type(_expected(v, n))
    assert len(v) == len(_cases()[name]) and np.array_equal(v, _cases()[name])  # the input is left as it was


def test_n_past_the_values_is_refused():
    with pytest.raises(ValueError, match="expected 1 <= n <= 3"):
        nth_largest(np.arange(3), 4)
    with pytest.raises(ValueError):
        nth_largest(np.arange(3), 0)
