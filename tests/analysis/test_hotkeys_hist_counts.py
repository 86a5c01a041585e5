"""The per-range value histograms of the streamed hot-key pass: the same values and counts as ``np.unique``."""

import numpy as np
import pytest

from explorer.analysis.hotkeys import _OperatorPass, _value_counts


@pytest.mark.parametrize("v", [
    np.array([3, 1, 3, 0, 7, 7, 7], dtype=np.int64),  # counted
    np.array([5], dtype=np.int64),
    np.array([], dtype=np.int64),
    np.array([-2, 5, 5, 1], dtype=np.int64),  # negative: sorted
    np.array([10**12, 1, 1], dtype=np.int64),  # sparse: sorted
    np.random.default_rng(3).integers(0, 5000, 20_000),
])
def test_value_counts_equal_numpys_unique(v):
    want_vals, want_counts = np.unique(v, return_counts=True)
    vals, counts = _value_counts(v)
    assert vals.dtype == want_vals.dtype and np.array_equal(vals, want_vals)
    assert np.array_equal(counts, want_counts)


def test_histograms_merged_over_ranges_equal_one_over_all_values():
    rng = np.random.default_rng(5)
    parts = [rng.integers(0, 300, 1000), rng.integers(0, 10**9, 50), rng.integers(0, 40, 10)]
    acc = _OperatorPass()
    for p in parts:
        acc.add_hist("bytes", p.astype(np.int64))
    vals, counts = np.unique(np.concatenate(parts), return_counts=True)
    assert np.array_equal(acc.hist["bytes"][0], vals) and np.array_equal(acc.hist["bytes"][1], counts)
