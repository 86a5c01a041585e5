"""How figures are shown to people: counts, bytes, durations, shares and nulls."""

import numpy as np
import pandas as pd

from explorer.plots.format import (MISSING, format_frame, human_bytes, human_count, human_duration, human_share,
                                   human_time)


def test_counts_have_no_decimals():
    assert human_count(994.0) == "994" and human_count(1234567) == "1,234,567"


def test_bytes_durations_shares_and_times():
    assert human_bytes(512) == "512 B" and human_bytes(150 * 1024) == "150.0 KB" and human_bytes(-2048) == "-2.0 KB"
    assert human_duration(86_400_000) == "1 d" and human_duration(147.3) == "147 ms"
    assert human_duration(1500) == "1.5 s" and human_duration(1_800_000) == "30 min"
    assert human_share(0.505353) == "50.5 %"
    assert human_time(pd.Timestamp(0, unit="ms", tz="UTC")) == "1970-01-01 00:00:00 UTC"


def test_nulls_are_a_dash_never_none_nan_or_nat():
    for v in (None, np.nan, pd.NaT, pd.NA):
        assert human_bytes(v) == human_duration(v) == human_count(v) == human_share(v) == MISSING


def test_format_frame_by_column_name():
    df = pd.DataFrame({"entries": [994.0, np.nan], "bytes": [2048, 1], "ttl_ms": [86_400_000, None],
                       "share": [0.5, 0.25], "records": pd.array([3, None], dtype="Int64"), "key": ["a", None]})
    out = format_frame(df)
    assert out.to_dict("list") == {"entries": ["994", MISSING], "bytes": ["2.0 KB", "1 B"],
                                   "ttl_ms": ["1 d", MISSING], "share": ["50.0 %", "25.0 %"],
                                   "records": ["3", "unknown"], "key": ["a", MISSING]}  # traffic: issue 30


def test_a_table_of_metrics_shows_each_row_in_its_metric_unit():
    """The report's subtask table printed a bytes row's total as 6,416 beside an entries row's 802 (issue 30)."""
    df = pd.DataFrame({"metric": ["entries", "bytes", "records", "keys"], "total": [802, 6416, pd.NA, 802],
                       "mean": [401.0, 3208.0, pd.NA, 401.0], "max_over_mean": [1.01, 1.01, pd.NA, 1.01]})
    df["total"] = df["total"].astype("Int64")
    df["mean"] = df["mean"].astype("Float64")
    shown = format_frame(df)
    assert list(shown["total"]) == ["802", "6.3 KB", "unknown", "802"]
    assert list(shown["mean"]) == ["401", "3.1 KB", "unknown", "401"]
    assert list(shown["max_over_mean"]) == ["1.01", "1.01", MISSING, "1.01"]
