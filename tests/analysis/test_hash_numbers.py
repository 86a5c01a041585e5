"""The entry hashes of numbers a diff compares: the numba finalizer gives pandas.util.hash_array's values."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from explorer.analysis import _columns


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float32",
                                   "float64", "bool", "datetime64[ns]", "timedelta64[ms]"])
def test_numbers_hash_as_pandas_hash_array(monkeypatch, dtype):
    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    rnd = np.random.default_rng(3)
    raw = rnd.integers(-2**62, 2**62, 5000)
    raw[:6] = [0, -1, 1, 2**62, -2**62, 7]
    if dtype.startswith(("datetime", "timedelta")):
        vals = raw.astype(dtype)
    elif dtype == "bool":
        vals = raw % 2 == 0
    elif dtype.startswith("float"):
        vals = (raw / 7.0).astype(dtype)
        vals[:4] = [np.nan, -0.0, 0.0, np.inf]
    else:
        vals = raw.astype(dtype)
    vals = vals[::2]  # not contiguous
    assert np.array_equal(_columns._hash_numbers(vals), pd.util.hash_array(vals))


def test_arrow_hash_of_numbers_with_nulls_unchanged(monkeypatch):
    col = pa.chunked_array([pa.array([1, None, 3, 2**40], type=pa.int64()), pa.array([None, 5], type=pa.int64())])
    before = _columns.arrow_hash(col)
    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    assert np.array_equal(_columns.arrow_hash(col), before)
