"""The explorer's own entry point and analyses on real Flink snapshots (issue 7: "every analysis works")."""

from __future__ import annotations

from datetime import timedelta

import pytest

import explorer
from explorer.readers.base import CONTRACT_COLUMNS

from tests.support.flink import DATASTREAM_FIXTURES, FLINK_FIXTURES, SQL_FIXTURES, expected
from tests.support.flink import UIDS



def ttl_of(exp: dict) -> dict[str, timedelta]:
    """Flink does not store TTL durations: the job's own, from EXPECTED.json."""
    return {state: timedelta(milliseconds=ms) for state, ms in exp["ttl_ms"].items()}


@pytest.mark.parametrize("name", DATASTREAM_FIXTURES)
def test_open_detects_flink_and_finds_the_planted_hot_keys(name):
    exp = expected(name)
    snap = explorer.open(FLINK_FIXTURES / name, uids=UIDS, ttl=ttl_of(exp))
    assert snap.format.startswith("flink-")
    df = snap.keyed_state()
    assert list(df.columns[: len(CONTRACT_COLUMNS)]) == list(CONTRACT_COLUMNS)
    hot = snap.hot_keys(n=3)
    assert hot[hot["operator"] == "user-state"]["key"].tolist() == [k for k, _ in exp["hot_keys"]]


@pytest.mark.parametrize("name", SQL_FIXTURES)
def test_open_reads_flink_sql_state(name):
    """A GROUP BY keeps one same-sized accumulator row per key: heat is in the values, not the bytes."""
    exp = expected(name)
    snap = explorer.open(FLINK_FIXTURES / name)
    df = snap.keyed_state()
    acc = df[df["state"] == "accState"]
    counts = {k: v["f0"] for k, v in zip(acc["key"], acc["value"])}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert [[k, c] for k, c in top] == exp["hot_keys"]


@pytest.mark.parametrize("name", DATASTREAM_FIXTURES[:3])
def test_analyses_run_on_flink_state(name):
    exp = expected(name)
    snap = explorer.open(FLINK_FIXTURES / name, uids=UIDS, ttl=ttl_of(exp))
    kg = snap.key_group_distribution()
    user_kg = kg[kg["operator"] == "user-state"]
    assert user_kg["key_group"].nunique() == exp["max_parallelism"]
    assert user_kg["keys"].sum() > 0
    what_if = snap.rescale_whatif([1, 2, 4])
    assert set(what_if["parallelism"]) >= {1, 2, 4}
    ttl = snap.ttl_summary()
    assert set(ttl.loc[ttl["operator"] == "user-state", "state"]) >= set(exp["ttl_ms"])
    skew = snap.key_skew()
    top = skew.set_index("operator").loc["user-state", "top_key"]
    top = top.iat[0] if hasattr(top, "iat") else top
    assert top == exp["hot_keys"][0][0]
