"""Analyses on Spark over Parquet give the same answers as the in-process pandas path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from explorer.analysis.distribution import key_group_aggregates as pandas_aggregates
from explorer.readers.base import make_piece
from explorer.spark.analysis import export_parquet, key_group_aggregates, top_keys

pytestmark = pytest.mark.spark


def _pieces():
    rng = np.random.default_rng(7)
    keys = [f"user-{i}" for i in rng.zipf(1.3, 3000) % 500]  # a key lives in one key group, as in a snapshot
    n = len(keys)
    a = make_piece({"operator": "sessions", "state": "session", "kind": "list", "key": keys,
                    "key_group": [int(k.split("-")[1]) % 128 for k in keys], "subtask": np.zeros(n, np.int32),
                    "value": rng.integers(0, 9, n), "size_bytes": rng.integers(10, 200, n)})
    m = 400
    b = make_piece({"operator": "counts", "state": "count", "kind": "value", "key": np.arange(m),
                    "key_group": np.arange(m) % 4, "subtask": np.arange(m) % 4, "value": np.ones(m, np.int64),
                    "size_bytes": np.full(m, 16)})
    t = make_piece({"operator": "counts", "state": "$procTimers", "kind": "processing_timer",
                    "key": np.arange(5), "key_group": np.zeros(5, np.int32), "subtask": np.zeros(5, np.int32),
                    "value": np.arange(5), "size_bytes": np.full(5, 8)})
    return [a, b, t]


def test_key_group_aggregates_equal_pandas(spark, tmp_path):
    pieces = _pieces()
    path = export_parquet(pieces, tmp_path / "state")
    for op, m in (("sessions", 128), ("counts", 4)):
        df = pieces[0].to_pandas() if op == "sessions" else pd.concat([p.to_pandas() for p in pieces[1:]])
        expected = pandas_aggregates(df, operator=op, max_parallelism=m).reset_index(drop=True)
        got = key_group_aggregates(path, {"sessions": 128, "counts": 4}, operator=op, spark=spark)
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_top_keys_equal_pandas(spark, tmp_path):
    pieces = _pieces()
    path = export_parquet(pieces[:1], tmp_path / "state")
    df = pieces[0].to_pandas()
    per_key = df.groupby("key").agg(entries=("key", "size"), bytes=("size_bytes", "sum")).reset_index()
    expected = per_key.sort_values(["bytes", "entries", "key"], ascending=[False, False, True]).head(5)
    got = top_keys(path, n=5, by="bytes", spark=spark)
    assert got["key"].tolist() == expected["key"].tolist()
    assert got["bytes"].tolist() == expected["bytes"].tolist()
    assert got["share"].iloc[0] == pytest.approx(expected["bytes"].iloc[0] / df["size_bytes"].sum())
